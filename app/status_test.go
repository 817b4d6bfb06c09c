package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/scour-project/scour/admin"
)

// Placement goes down while scourd runs: scourctl status (over the admin
// socket) still gets the store's quarantines and open runs, with why
// Placement's view is missing, instead of an error.
func TestAdminStatusWithPlacementDown(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case down.Load():
			http.Error(w, "placement is down", http.StatusServiceUnavailable)
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/":
			io.WriteString(w, `{"versions": [{"id": "v1.0", "min_version": "1.0", "max_version": "1.39", "status": "CURRENT"}]}`)
		default:
			io.WriteString(w, `{"resource_providers": []}`)
		}
	}))
	t.Cleanup(ps.Close)
	cfg := lifecycleConfig(t, t.TempDir(), "cmp1")
	cfg.Placement.Endpoint = ps.URL
	cfg.Placement.Retry.Attempts = 1
	a, cleanup, err := New(cfg, slog.New(slog.DiscardHandler), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	go a.admin.Serve()
	ctx := context.Background()
	if _, _, err := a.lifecycle.store.Retire(ctx, "cmp1", "rp-1", "0000:81:00.0", "alice", "RMA 42", "", ""); err != nil {
		t.Fatal(err)
	}
	down.Store(true) // up until New negotiated the microversion
	rep, err := admin.NewClient(cfg.Admin.Socket).Status(ctx)
	if err != nil {
		t.Fatalf("status with Placement down: %v", err)
	}
	if !strings.Contains(rep.PlacementError, "scanning this host in Placement") || !strings.Contains(rep.PlacementError, "503") {
		t.Errorf("PlacementError %q does not say that Placement failed and how", rep.PlacementError)
	}
	if len(rep.Devices) != 1 || rep.Devices[0].Address != "0000:81:00.0" || !strings.Contains(rep.Devices[0].Held, "RMA 42") ||
		!rep.Devices[0].PlacementUnknown {
		t.Errorf("devices %+v; want the retired 0000:81:00.0 from the store, Placement's state unknown", rep.Devices)
	}
}
