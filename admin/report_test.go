package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/placement"
)

// reportStore is a claims store holding one open retirement of rp-9, and
// failing every read when down.
type reportStore struct{ down bool }

func (s reportStore) fail() error {
	if s.down {
		return errors.New("db down")
	}
	return nil
}
func (s reportStore) ListRuns(context.Context, claims.RunFilter) ([]claims.Run, error) {
	return nil, s.fail()
}
func (s reportStore) Steps(context.Context, string) ([]claims.Step, error) { return nil, s.fail() }
func (s reportStore) ActiveQuarantine(_ context.Context, _, rp string) (claims.Quarantine, bool, error) {
	return claims.Quarantine{DeviceRP: "rp-9", Reason: "retired by alice: RMA"}, rp == "rp-9", s.fail()
}
func (s reportStore) UnfinishedRuns(context.Context, string) ([]claims.Run, error) {
	return nil, s.fail()
}
func (s reportStore) OpenQuarantines(context.Context, string) ([]claims.Quarantine, error) {
	return []claims.Quarantine{{DeviceRP: "rp-9", Address: "0000:82:00.0", Reason: "retired by alice: RMA"}}, s.fail()
}

// scourctl status lists Placement's devices while Placement answers; while
// it does not, the store's quarantined devices with Placement's error, and
// both errors when the store cannot be read either.
func TestHostReportFallsBackToTheStore(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	up := func(context.Context) ([]placement.Device, error) {
		return []placement.Device{{Ref: placement.Ref{UUID: "rp-1", Address: "0000:81:00.0"}, State: placement.StateAvailable}}, nil
	}
	down := func(context.Context) ([]placement.Device, error) { return nil, errors.New("placement unreachable") }

	rep, err := HostReport(ctx, up, reportStore{}, "cmp1", now)
	if err != nil || rep.PlacementError != "" || len(rep.Devices) != 1 || rep.Devices[0].RP != "rp-1" {
		t.Fatalf("Placement up: %+v, %v; want rp-1 from the scan", rep, err)
	}
	rep, err = HostReport(ctx, down, reportStore{}, "cmp1", now)
	if err != nil || !strings.Contains(rep.PlacementError, "placement unreachable") ||
		len(rep.Devices) != 1 || rep.Devices[0].RP != "rp-9" || !rep.Devices[0].PlacementUnknown || rep.Devices[0].Held == "" {
		t.Fatalf("Placement down: %+v, %v; want rp-9's retirement from the store, with Placement's error", rep, err)
	}
	_, err = HostReport(ctx, down, reportStore{down: true}, "cmp1", now)
	if err == nil || !strings.Contains(err.Error(), "placement unreachable") || !strings.Contains(err.Error(), "db down") {
		t.Fatalf("both down: %v; want both errors", err)
	}
}
