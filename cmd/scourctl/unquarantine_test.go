package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/hardware"
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

// fakeOrphans is this host's tree and the store's open quarantines;
// released records each release as rp|by|reason.
type fakeOrphans struct {
	devs     []placement.Device
	open     []claims.Quarantine
	released []string
}

func (f *fakeOrphans) Scan(context.Context) (*placement.ScanResult, error) {
	return &placement.ScanResult{Devices: f.devs}, nil
}

func (f *fakeOrphans) Reserve(context.Context, placement.Ref) error {
	return errors.New("unexpected Placement write")
}

func (f *fakeOrphans) Unquarantine(context.Context, placement.Ref) error {
	return errors.New("unexpected Placement write")
}

func (f *fakeOrphans) OpenQuarantines(context.Context, string) ([]claims.Quarantine, error) {
	return f.open, nil
}

func (f *fakeOrphans) ReleaseQuarantine(_ context.Context, _, rp, by, reason string) (bool, error) {
	for i, q := range f.open {
		if q.DeviceRP == rp {
			f.open = append(f.open[:i], f.open[i+1:]...)
			f.released = append(f.released, rp+"|"+by+"|"+reason)
			return true, nil
		}
	}
	return false, nil
}

// unquarantine --rp releases a quarantine only the store holds (the
// retired device was removed from device_spec and Nova deleted its
// provider), recording who and why, and refuses, releasing nothing,
// while that provider is in the tree, while another provider is at its
// address (that is the device now), or when it has no open quarantine.
// Without it no command could release such a quarantine.
func TestUnquarantineOrphanReleasesOnlyAGoneProvider(t *testing.T) {
	t.Setenv("SUDO_USER", "alice")
	cfg := &config.Config{Host: "compute-1"}
	const gone, addr = "5f1c0000-0000-4000-8000-0000000000aa", "0000:81:00.0"
	retired := claims.Quarantine{Host: "compute-1", DeviceRP: gone, Address: addr, Reason: "RMA 42"}
	dev := func(uuid, address string) placement.Device {
		return placement.Device{Ref: placement.Ref{UUID: uuid, Name: "cmp_" + address, Address: hardware.Address(address)}}
	}
	for _, tc := range []struct {
		name    string
		devs    []placement.Device
		open    []claims.Quarantine
		refusal string
	}{
		{"provider in the tree", []placement.Device{dev(gone, addr)}, []claims.Quarantine{retired}, "is in host compute-1's Placement tree"},
		{"another provider at its address", []placement.Device{dev("5f1c0000-0000-4000-8000-0000000000bb", addr)}, []claims.Quarantine{retired}, "is at its address 0000:81:00.0"},
		{"no open quarantine", nil, nil, "has no open quarantine"},
		{"gone", []placement.Device{dev("5f1c0000-0000-4000-8000-0000000000cc", "0000:82:00.0")}, []claims.Quarantine{retired}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeOrphans{devs: tc.devs, open: tc.open}
			var out strings.Builder
			err := unquarantineOrphan(context.Background(), f, f, hwAt{}, cfg, orphanRelease{rp: gone, why: "card returned to the vendor"}, &out)
			if tc.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusal) || len(f.released) != 0 {
					t.Fatalf("err %v, released %v; want the refusal %q and nothing released", err, f.released, tc.refusal)
				}
				return
			}
			if err != nil {
				t.Fatalf("unquarantine --rp: %v\n%s", err, out.String())
			}
			if len(f.released) != 1 || !strings.HasPrefix(f.released[0], gone+"|alice|") ||
				!strings.Contains(f.released[0], "none at address "+addr) || !strings.Contains(f.released[0], "card returned to the vendor") {
				t.Errorf("releases %q; want %s released by alice, naming the address and the reason", f.released, gone)
			}
			if !strings.Contains(out.String(), "released the retirement (RMA 42)") {
				t.Errorf("output:\n%s", out.String())
			}
		})
	}
}

// hwAt is hardware discovery finding PCI devices at the addresses listed.
type hwAt map[hardware.Address]bool

func (h hwAt) Present(_ context.Context, a hardware.Address) (bool, error) {
	if h["error"] {
		return false, errors.New("sysfs unreadable")
	}
	return h[a], nil
}

// unquarantine --rp trusts Placement's listing only as far as this
// host's hardware agrees: a provider missing from the tree while its card
// is still in the host (device_spec mistake, trait dropped) comes back
// unreserved, so releasing its quarantine would pool the card uncleaned.
// It refuses when discovery finds a PCI device at the address, when the
// quarantine has no address, and when discovery fails; --force without
// --reason is refused; --force --reason releases past the first two and
// records what it overrode.
func TestUnquarantineOrphanRefusesWhileTheCardIsInTheHost(t *testing.T) {
	t.Setenv("SUDO_USER", "alice")
	cfg := &config.Config{Host: "compute-1"}
	const gone, addr = "5f1c0000-0000-4000-8000-0000000000aa", "0000:81:00.0"
	quarantine := func(address string) []claims.Quarantine {
		return []claims.Quarantine{{Host: "compute-1", DeviceRP: gone, Address: address, RunID: "run-7", Reason: "wipe failed"}}
	}
	for _, tc := range []struct {
		name     string
		open     []claims.Quarantine
		hw       hwAt
		o        orphanRelease
		refusal  string // "" releases
		recorded string
	}{
		{"card at its address", quarantine(addr), hwAt{addr: true}, orphanRelease{rp: gone}, "hardware discovery finds a PCI device at its address 0000:81:00.0", ""},
		{"no address", quarantine(""), hwAt{}, orphanRelease{rp: gone}, "records no PCI address", ""},
		{"discovery fails", quarantine(addr), hwAt{"error": true}, orphanRelease{rp: gone, why: "x", force: true}, "sysfs unreadable", ""},
		{"force without reason", quarantine(addr), hwAt{addr: true}, orphanRelease{rp: gone, force: true}, "--force needs --reason", ""},
		{"forced past the card", quarantine(addr), hwAt{addr: true}, orphanRelease{rp: gone, why: "card moved to the host's own use", force: true}, "", "--force: provider not in host compute-1's Placement tree, none at address 0000:81:00.0, but hardware discovery finds a PCI device"},
		{"forced past no address", quarantine(""), hwAt{}, orphanRelease{rp: gone, why: "card gone, checked by hand", force: true}, "", "but the quarantine records no PCI address"},
		{"card pulled", quarantine(addr), hwAt{"0000:82:00.0": true}, orphanRelease{rp: gone, why: "dead card pulled"}, "", "none at address 0000:81:00.0; dead card pulled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeOrphans{open: tc.open}
			var out strings.Builder
			err := unquarantineOrphan(context.Background(), f, f, tc.hw, cfg, tc.o, &out)
			if tc.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusal) || len(f.released) != 0 {
					t.Fatalf("err %v, released %v; want the refusal %q and nothing released", err, f.released, tc.refusal)
				}
				if strings.Contains(tc.refusal, "PCI") && !strings.Contains(err.Error(), "--force") {
					t.Errorf("refusal %q does not say what --force does", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unquarantine --rp: %v\n%s", err, out.String())
			}
			if len(f.released) != 1 || !strings.Contains(f.released[0], tc.recorded) || !strings.Contains(f.released[0], tc.o.why) {
				t.Errorf("releases %q; want one recording %q and the reason", f.released, tc.recorded)
			}
		})
	}
}
