package placement

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The one dirty predicate: fenced, free, not quarantined. Each
// condition alone keeps a device from being cleaned (rule 2, rule 4).
func TestGateDirtyPredicate(t *testing.T) {
	t.Parallel()
	dirty := Device{State: StateDirty, Inventory: Inventory{Total: 1, Reserved: 1}}
	if !dirty.Dirty() || !dirty.Fenced() || dirty.InUse() {
		t.Fatalf("fenced free device: Dirty %v Fenced %v InUse %v; want true true false", dirty.Dirty(), dirty.Fenced(), dirty.InUse())
	}
	for name, mod := range map[string]func(*Device){
		"usage without a listed consumer": func(d *Device) { d.Used = 1 },
		"a consumer":                      func(d *Device) { d.Consumers = []string{"inst-1"} },
		"un-reserved meanwhile":           func(d *Device) { d.Inventory.Reserved = 0 },
		"no inventory":                    func(d *Device) { d.Inventory = Inventory{} },
		"quarantined":                     func(d *Device) { d.Quarantined = true },
	} {
		d := dirty
		mod(&d)
		if d.Dirty() {
			t.Errorf("%s: Dirty() = true; want false", name)
		}
	}
	if !Retirable(1, 1, false, true) || Retirable(1, 1, true, true) || Retirable(1, 0, false, true) || Retirable(1, 1, false, false) {
		t.Error("Retirable: want fenced, free and quarantined only")
	}
	if !QuarantineHeld(1, 1, true) || QuarantineHeld(1, 0, true) || QuarantineHeld(1, 1, false) || QuarantineHeld(0, 0, true) {
		t.Error("QuarantineHeld: want fenced with the trait only")
	}
}

// gateDevice answers reads of unitDev at generation 7: reserved res (of
// 1), consumers holding it, the quarantine trait when quarantined. PUTs
// are counted and accepted.
type gateDevice struct {
	mu          sync.Mutex
	res         int
	consumers   []string
	quarantined bool
	puts        int
}

func (g *gateDevice) handle(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case r.Method == http.MethodPut:
		g.puts++
		io.WriteString(w, `{"resource_provider_generation": 8, "inventories": {}}`)
	case strings.HasSuffix(r.URL.Path, "/inventories"):
		fmt.Fprintf(w, `{"resource_provider_generation": 7, "inventories": {"CUSTOM_PCI_144D_A80A":
 {"total": 1, "reserved": %d, "min_unit": 1, "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0}}}`, g.res)
	case strings.HasSuffix(r.URL.Path, "/allocations"):
		var allocs []string
		for _, c := range g.consumers {
			allocs = append(allocs, fmt.Sprintf(`%q: {"resources": {"CUSTOM_PCI_144D_A80A": 1}}`, c))
		}
		fmt.Fprintf(w, `{"resource_provider_generation": 7, "allocations": {%s}}`, strings.Join(allocs, ","))
	case strings.HasSuffix(r.URL.Path, "/traits"):
		traits := `"HW_PCI_ONE_TIME_USE"`
		if g.quarantined {
			traits += `, "CUSTOM_SCOUR_QUARANTINED"`
		}
		fmt.Fprintf(w, `{"resource_provider_generation": 7, "traits": [%s]}`, traits)
	default:
		http.NotFound(w, r)
	}
}

func newTestGate(t *testing.T, g *gateDevice) (*Gate, *fakePlacement) {
	t.Helper()
	f := &fakePlacement{handle: g.handle}
	srv := startFake(t, f)
	c, err := New(context.Background(), unitConfig(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return NewGate(c, nil), f
}

// The check before a destructive step answers "in use" unless Placement
// shows the device dirty now: allocated, un-reserved meanwhile and
// quarantined devices are all refused (rule 2, rule 4).
func TestGateHasAllocations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		dev  *gateDevice
		want bool
	}{
		{"dirty", &gateDevice{res: 1}, false},
		{"allocated", &gateDevice{res: 1, consumers: []string{"6f0e3c53-3d0c-4d52-a0c4-1b1e4b1e0c11"}}, true},
		{"un-reserved meanwhile", &gateDevice{res: 0}, true},
		{"quarantined", &gateDevice{res: 1, quarantined: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, _ := newTestGate(t, tc.dev)
			got, err := g.HasAllocations(context.Background(), unitDev.UUID)
			if err != nil || got != tc.want {
				t.Errorf("HasAllocations = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// The check before a retirement wipe wants the device fenced, retired
// (quarantined) and free.
func TestGateHasAllocationsRetired(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		dev  *gateDevice
		want bool
	}{
		{"retired and free", &gateDevice{res: 1, quarantined: true}, false},
		{"retired but allocated", &gateDevice{res: 1, quarantined: true, consumers: []string{"6f0e3c53-3d0c-4d52-a0c4-1b1e4b1e0c11"}}, true},
		{"not quarantined", &gateDevice{res: 1}, true},
		{"not fenced", &gateDevice{res: 0, quarantined: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, _ := newTestGate(t, tc.dev)
			got, err := g.HasAllocationsRetired(context.Background(), unitDev.UUID)
			if err != nil || got != tc.want {
				t.Errorf("HasAllocationsRetired = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// The un-reserve choice: after the check read the device dirty, one PUT at
// that read's generation and no further read; a device the read showed in
// use is never written on the strength of that read (the shortcut looks
// at usage): it is re-read and refused (rule 2).
func TestGateUnreserveChoosesBySeenRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dev := &gateDevice{res: 1}
	g, f := newTestGate(t, dev)
	if in, err := g.HasAllocations(ctx, unitDev.UUID); in || err != nil {
		t.Fatalf("HasAllocations = %v, %v", in, err)
	}
	reads := f.count("GET")
	if err := g.Unreserve(ctx, unitDev, "run-1"); err != nil {
		t.Fatal(err)
	}
	if dev.puts != 1 || f.count("GET") != reads {
		t.Errorf("un-reserve after a dirty read: %d PUT(s), %d more read(s); want 1 PUT and no read", dev.puts, f.count("GET")-reads)
	}

	used := &gateDevice{res: 1, consumers: []string{"6f0e3c53-3d0c-4d52-a0c4-1b1e4b1e0c11"}}
	g, _ = newTestGate(t, used)
	if in, err := g.HasAllocations(ctx, unitDev.UUID); !in || err != nil {
		t.Fatalf("HasAllocations of an allocated device = %v, %v", in, err)
	}
	if err := g.Unreserve(ctx, unitDev, "run-2"); !errors.Is(err, ErrAllocated) || used.puts != 0 {
		t.Errorf("un-reserve after a read that showed an allocation: %v, %d PUT(s); want ErrAllocated and none", err, used.puts)
	}

	// With no read remembered, Unreserve reads and verifies first.
	fresh := &gateDevice{res: 1}
	g, f = newTestGate(t, fresh)
	if err := g.Unreserve(ctx, unitDev, ""); err != nil || fresh.puts != 1 || f.count("GET") == 0 {
		t.Errorf("un-reserve without a read: %v, %d PUT(s), %d read(s); want a verified PUT", err, fresh.puts, f.count("GET"))
	}
}

// Which of the gate's errors retrying cannot fix: a 4xx other than a
// conflict. Its refusals and transient failures are retried or handled.
func TestGateIsPermanent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"400", &DeviceError{Op: "burn", Err: &APIError{Status: 400}}, true},
		{"404", fmt.Errorf("%w: %w", ErrNotFound, &APIError{Status: 404}), true},
		{"409", &APIError{Status: 409}, false},
		{"500", &APIError{Status: 500}, false},
		{"transient", &RecoverableError{Err: &APIError{Status: 400}}, false},
		{"allocated", &DeviceError{Op: "unreserve", Err: fmt.Errorf("%w: %w", ErrAllocated, &APIError{Status: 400})}, false},
		{"quarantined", fmt.Errorf("%w: %w", ErrQuarantined, &APIError{Status: 400}), false},
		{"un-reserved elsewhere", fmt.Errorf("%w: %w", ErrUnreservedElsewhere, &APIError{Status: 400}), false},
		{"stale return", fmt.Errorf("%w: %w", ErrStaleReturn, &APIError{Status: 400}), false},
		{"not allocated", fmt.Errorf("%w: %w", ErrNotAllocated, &APIError{Status: 400}), false},
		{"unmanaged", fmt.Errorf("%w: %w", ErrUnmanaged, &APIError{Status: 400}), false},
		{"nil", nil, false},
		{"other", errors.New("x"), false},
	} {
		if got := IsPermanent(tc.err); got != tc.want {
			t.Errorf("%s: IsPermanent = %v; want %v", tc.name, got, tc.want)
		}
	}
}
