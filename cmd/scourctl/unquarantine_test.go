package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/placement"
)

// fakeUnquarantine is one device in Placement and its quarantine in the
// store; ops lists the writes in order.
type fakeUnquarantine struct {
	dev        placement.Device
	open       bool
	reserveErr error
	ops        []string
}

func (f *fakeUnquarantine) Scan(context.Context) (*placement.ScanResult, error) {
	return &placement.ScanResult{Devices: []placement.Device{f.dev}}, nil
}

func (f *fakeUnquarantine) Reserve(context.Context, placement.Ref) error {
	f.ops = append(f.ops, "reserve")
	if f.reserveErr != nil {
		return f.reserveErr
	}
	f.dev.Inventory.Reserved = f.dev.Inventory.Total
	return nil
}

func (f *fakeUnquarantine) Unquarantine(context.Context, placement.Ref) error {
	f.ops = append(f.ops, "remove trait")
	f.dev.Quarantined = false
	return nil
}

func (f *fakeUnquarantine) ActiveQuarantine(_ context.Context, _, rp string) (claims.Quarantine, bool, error) {
	return claims.Quarantine{DeviceRP: rp, RunID: "run-1", Reason: "verify failed"}, f.open, nil
}

func (f *fakeUnquarantine) ReleaseQuarantine(context.Context, string, string, string, string) (bool, error) {
	f.ops = append(f.ops, "release")
	was := f.open
	f.open = false
	return was, nil
}

// A quarantined device that Placement shows below reserved=total (an
// inventory set without --amend) is fenced before its quarantine is
// released, and the output says what Placement shows after the writes.
// When the fence cannot be written, nothing is released. Without the fix
// the release left it un-reserved, saying "still reserved (0/1)".
func TestUnquarantineNeverLeavesTheDeviceUnreserved(t *testing.T) {
	cfg := &config.Config{Host: "compute-1"}
	cfg.Placement.QuarantineTrait = "CUSTOM_SCOUR_QUARANTINED"
	dev := func() placement.Device {
		d := placement.Device{Ref: placement.Ref{UUID: "5f1c0000-0000-4000-8000-000000000001", Name: "cmp_0000:81:00.0", Address: "0000:81:00.0"}, Quarantined: true}
		d.Inventory.Total, d.Inventory.Reserved = 1, 0
		return d
	}
	f := &fakeUnquarantine{dev: dev(), open: true}
	var out strings.Builder
	if _, err := unquarantine(context.Background(), f, f, cfg, "0000:81:00.0", &out); err != nil {
		t.Fatalf("unquarantine: %v\n%s", err, out.String())
	}
	if got := strings.Join(f.ops, ", "); got != "reserve, release, remove trait" {
		t.Errorf("writes: %s; want the fence before the release", got)
	}
	if f.dev.Inventory.Reserved != 1 || f.open || f.dev.Quarantined {
		t.Errorf("after unquarantine: reserved %d/1, store quarantine open %v, trait %v; want 1/1, released, removed", f.dev.Inventory.Reserved, f.open, f.dev.Quarantined)
	}
	if !strings.Contains(out.String(), "still reserved (1/1), quarantine trait false") {
		t.Errorf("output does not say what Placement shows after the writes:\n%s", out.String())
	}

	f = &fakeUnquarantine{dev: dev(), open: true, reserveErr: errors.New("409 conflict")}
	out.Reset()
	_, err := unquarantine(context.Background(), f, f, cfg, "0000:81:00.0", &out)
	if err == nil || !strings.Contains(err.Error(), "nothing released") || !f.open || !f.dev.Quarantined {
		t.Errorf("fence failed: err %v, store quarantine open %v, trait %v; want an error, nothing released", err, f.open, f.dev.Quarantined)
	}
}
