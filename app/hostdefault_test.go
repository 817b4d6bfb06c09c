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
	// seed registers cmp1's key and, with retire, an open retirement.
	seed := func(t *testing.T, cfg *config.Config, retire bool) {
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
		if !retire {
			return
		}
		if _, _, err := s.Retire(context.Background(), "cmp1", "rp-1", "0000:81:00.0", "alice", "RMA", "", ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("defaulted", func(t *testing.T) {
		cfg := lifecycleConfig(t, t.TempDir(), "cmp1.example.com")
		cfg.HostDefaulted = true // as Load leaves it where the hostname is cmp1.example.com and host is unset
		seed(t, cfg, true)
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
		// host set skips this check; the store's open retirement under
		// cmp1 still stops the start (TestRenamedHostRefusesOpenRecords).
		cfg := lifecycleConfig(t, t.TempDir(), "cmp1.example.com")
		seed(t, cfg, true)
		_, cleanup, err := New(cfg, log, Deps{})
		if err == nil {
			cleanup()
			t.Fatal("scourd started as cmp1.example.com over cmp1's open retirement")
		}
		if strings.Contains(err.Error(), "scour's default host was the short hostname") || !strings.Contains(err.Error(), "scourctl host adopt cmp1") {
			t.Errorf("host set in scour.yaml: want the renamed-host refusal, got %v", err)
		}
	})
	t.Run("explicit with nothing open", func(t *testing.T) {
		cfg := lifecycleConfig(t, t.TempDir(), "cmp1.example.com")
		seed(t, cfg, false)
		_, cleanup, err := New(cfg, log, Deps{})
		if err != nil {
			t.Fatalf("host set in scour.yaml, cmp1 holding nothing open: %v", err)
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

// host renamed (scour.yaml or SCOUR_HOST) with the same node: every row
// of the store is keyed by host, so scourd under the new name would see
// none of the old name's open quarantines, runs and claims, and a
// retired device whose trait Nova rewrote away would be cleaned and
// returned. scourd refuses to start (exit 2), naming both names, the
// counts and the way out, and writes nothing under the new name; once
// the records are moved (scourctl host adopt: claims.AdoptHost) it
// starts and holds the retirement under the new name.
func TestRenamedHostRefusesOpenRecords(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	dir := t.TempDir()
	old := lifecycleConfig(t, dir, "cmp-a")
	signer, _, err := claims.LoadOrCreateKey(old.Claims.SigningKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	s, err := claims.Open(ctx, old.Claims, claims.WithLogger(log), claims.WithSigner(signer))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterKey(ctx, "cmp-a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Retire(ctx, "cmp-a", "rp-1", "0000:81:00.0", "alice", "RMA", "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordClaim(ctx, claims.Claim{Host: "cmp-a", Node: "node-1", InstanceUUID: "inst-1",
		PCI: []claims.PCIDevice{{RPUUID: "rp-2", Address: "0000:82:00.0"}}}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	cfg := lifecycleConfig(t, dir, "cmp-b")
	cfg.Node, cfg.Placement.Node = "node-1", "node-1" // the same compute node under a new host name
	_, cleanup, err := New(cfg, log, Deps{})
	if err == nil {
		cleanup()
		t.Fatal("scourd started as cmp-b over cmp-a's open retirement and live claim")
	}
	if !errors.Is(err, config.ErrInvalid) {
		t.Errorf("error %q is not config.ErrInvalid (exit 2, not restarted)", err)
	}
	for _, want := range []string{"scourd would start as cmp-b", "host cmp-a", "1 open quarantines or retirements, 0 open cleaning runs, 1 live claims",
		"set host: cmp-a", "scourctl host adopt cmp-a", "Renaming a host"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	s, err = claims.Open(ctx, cfg.Claims, claims.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	if has, err := s.HostHasRecords(ctx, "cmp-b"); err != nil || has {
		t.Errorf("the refused start wrote rows under cmp-b: %v, %v", has, err)
	}
	if _, err := s.AdoptHost(ctx, "cmp-a", "cmp-b", "test"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	l, cleanup, err := New(cfg, log, Deps{})
	if err != nil {
		t.Fatalf("start after the records moved to cmp-b: %v", err)
	}
	defer cleanup()
	_ = l
	s, err = claims.Open(ctx, cfg.Claims, claims.WithLogger(log), claims.ReadOnlySchema())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if q, ok, err := s.ActiveQuarantine(ctx, "cmp-b", "rp-1"); err != nil || !ok || !q.Retired() {
		t.Errorf("cmp-b's retirement of rp-1 after the move: %+v, %v, %v", q, ok, err)
	}
}
