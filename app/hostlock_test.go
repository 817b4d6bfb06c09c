package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
)

// A second scourd for a host whose claims store another scourd holds
// refuses to start, saying which host and what to do.
func TestNewRefusesWhileAnotherScourdHoldsTheHost(t *testing.T) {
	cfg, err := config.Load("/nonexistent/scour.yaml", false, []string{"SCOUR_HOST=compute-1", "SCOUR_HTTP_ADDRESS=127.0.0.1:0",
		"SCOUR_LIFECYCLE_ENABLED=false"}) // loads without pipelines; enabled below
	if err != nil {
		t.Fatal(err)
	}
	enabled := true
	cfg.Lifecycle.Enabled = &enabled
	cfg.Claims.StatePath = t.TempDir()
	log := slog.New(slog.DiscardHandler)
	first, err := claims.Open(context.Background(), cfg.Claims, claims.WithLogger(log), claims.WithHostLock("compute-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, cleanup, err := New(cfg, log, Deps{})
	if err == nil {
		cleanup()
		t.Fatal("scourd started while another scourd holds compute-1's claims store")
	}
	if !errors.Is(err, claims.ErrHostLocked) || !strings.Contains(err.Error(), "another scourd for host compute-1 holds") {
		t.Errorf("want the host-locked error naming compute-1, got %v", err)
	}
}

func TestHoldHostLockReturnsTheLoss(t *testing.T) {
	lost := errors.New("session ended")
	calls := 0
	check := func(context.Context) error {
		if calls++; calls == 3 {
			return lost
		}
		return nil
	}
	if err := holdHostLock(context.Background(), check, time.Millisecond); !errors.Is(err, lost) || calls != 3 {
		t.Errorf("holdHostLock = %v after %d checks, want the third check's error", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := holdHostLock(ctx, func(context.Context) error { return lost }, time.Millisecond); err != nil {
		t.Errorf("holdHostLock after a stop = %v, want nil", err)
	}
}
