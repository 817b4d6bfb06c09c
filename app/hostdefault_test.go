package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
)

// An upgrade from a scour whose default host was the short hostname, on a
// machine whose hostname is an FQDN and whose scour.yaml does not set
// host: scourd refuses to start under the FQDN while the store holds only
// the short name's rows (a retirement, a record key), saying to set host.
// With host set, or with a fresh store, it starts.
func TestDefaultFQDNHostRefusesShortNameStore(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	seed := func(t *testing.T, cfg *config.Config) {
		t.Helper()
		signer, _, err := claims.LoadOrCreateKey(cfg.Claims.SigningKeyPath())
		if err != nil {
			t.Fatal(err)
		}
		s, err := claims.Open(context.Background(), cfg.Claims, claims.WithLogger(log), claims.WithSigner(signer))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.RegisterKey(context.Background(), "cmp1"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Retire(context.Background(), "cmp1", "rp-1", "0000:81:00.0", "alice", "RMA", "", ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("defaulted", func(t *testing.T) {
		cfg := lifecycleConfig(t, t.TempDir(), "cmp1.example.com")
		cfg.HostDefaulted = true // as Load leaves it where the hostname is cmp1.example.com and host is unset
		seed(t, cfg)
		_, cleanup, err := New(cfg, log, Deps{})
		if err == nil {
			cleanup()
			t.Fatal("scourd started as cmp1.example.com over a store holding only cmp1's records")
		}
		// A configuration problem: scourd exits 2, which systemd does
		// not restart every 5 s.
		if !errors.Is(err, config.ErrInvalid) {
			t.Errorf("error %q is not config.ErrInvalid", err)
		}
		for _, want := range []string{"the claims store holds host cmp1's records",
			"scour's default host was the short hostname before scour 0.2", "set host: cmp1 in scour.yaml",
			"nova-compute's [DEFAULT] host"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		// Nothing was written under the FQDN, so the next start refuses too.
		s, err := claims.Open(context.Background(), cfg.Claims, claims.WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if has, err := s.HostHasRecords(context.Background(), "cmp1.example.com"); err != nil || has {
			t.Errorf("the refused start wrote rows under cmp1.example.com: %v, %v", has, err)
		}
	})
	t.Run("explicit", func(t *testing.T) {
		cfg := lifecycleConfig(t, t.TempDir(), "cmp1.example.com")
		seed(t, cfg)
		_, cleanup, err := New(cfg, log, Deps{})
		if err != nil {
			t.Fatalf("host set in scour.yaml: %v", err)
		}
		cleanup()
	})
	t.Run("fresh", func(t *testing.T) {
		cfg := lifecycleConfig(t, t.TempDir(), "cmp1.example.com")
		cfg.HostDefaulted = true
		_, cleanup, err := New(cfg, log, Deps{})
		if err != nil {
			t.Fatalf("fresh store: %v", err)
		}
		cleanup()
	})
}
