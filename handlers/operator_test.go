package handlers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// operatorRecords is the claims store as the operator commands read it:
// one device's open quarantine and last tenant, or an error.
type operatorRecords struct {
	quarantine *claims.Quarantine
	tenant     bool
	err        error
}

func (r operatorRecords) ActiveQuarantine(_ context.Context, host, rp string) (claims.Quarantine, bool, error) {
	if host != "cmp1" || rp != "rp-1" {
		return claims.Quarantine{}, false, errors.New("asked about " + host + "/" + rp + ", not cmp1/rp-1")
	}
	if r.err != nil {
		return claims.Quarantine{}, false, r.err
	}
	if r.quarantine == nil {
		return claims.Quarantine{}, false, nil
	}
	return *r.quarantine, true, nil
}

func (r operatorRecords) PreviousTenant(_ context.Context, host, rp string) (claims.Tenant, bool, error) {
	if host != "cmp1" || rp != "rp-1" {
		return claims.Tenant{}, false, errors.New("asked about " + host + "/" + rp + ", not cmp1/rp-1")
	}
	if r.err != nil {
		return claims.Tenant{}, false, r.err
	}
	return claims.Tenant{Instance: "inst-old"}, r.tenant, nil
}

func operatorDevice(change func(d *placement.Device)) placement.Device {
	d := placement.Device{Ref: placement.Ref{UUID: "rp-1", Name: "cmp1_0000:81:00.0", Address: "0000:81:00.0"},
		Inventory: placement.Inventory{Total: 1}}
	change(&d)
	return d
}

// An operator's clean is refused, as an operator error naming the device,
// for a device in use (rule 2) or quarantined in Placement or only in the
// store (rule 4); a device nobody holds, or one whose retirement was
// released, goes on. A store that cannot answer refuses too.
func TestOperatorCleanRefusal(t *testing.T) {
	t.Parallel()
	failed := &claims.Quarantine{RunID: "run-9", Reason: "wipe failed"}
	tests := map[string]struct {
		dev     func(d *placement.Device)
		records operatorRecords
		refused string // "" when the clean goes on
	}{
		"free":                  {dev: func(d *placement.Device) {}},
		"reserved, not in use":  {dev: func(d *placement.Device) { d.Inventory.Reserved = 1 }},
		"in use":                {dev: func(d *placement.Device) { d.Used, d.Consumers = 1, []string{"inst-a"} }, refused: "allocated to inst-a"},
		"quarantined":           {dev: func(d *placement.Device) { d.Quarantined = true }, refused: "is quarantined: release it first"},
		"quarantined in store":  {dev: func(d *placement.Device) {}, records: operatorRecords{quarantine: failed}, refused: "quarantined in the store (wipe failed)"},
		"in use and quarantine": {dev: func(d *placement.Device) { d.Consumers, d.Quarantined = []string{"inst-a"}, true }, refused: "allocated to inst-a"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			op := handlers.Operator{Records: tt.records, Host: "cmp1"}
			err := op.CleanRefusal(context.Background(), operatorDevice(tt.dev))
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("clean refused: %v", err)
				}
				return
			}
			var oe *admin.OperatorError
			if !errors.As(err, &oe) {
				t.Fatalf("clean of a device %s: got %v, want an operator refusal", name, err)
			}
			if !strings.Contains(oe.Msg, tt.refused) || !strings.Contains(oe.Msg, "0000:81:00.0") {
				t.Fatalf("refusal %q does not say %q and name the device", oe.Msg, tt.refused)
			}
		})
	}
	t.Run("store down", func(t *testing.T) {
		t.Parallel()
		op := handlers.Operator{Records: operatorRecords{err: errors.New("db down")}, Host: "cmp1"}
		err := op.CleanRefusal(context.Background(), operatorDevice(func(d *placement.Device) {}))
		if err == nil || !strings.Contains(err.Error(), "db down") || !strings.Contains(err.Error(), "0000:81:00.0") {
			t.Fatalf("clean with the claims store down: got %v, want its error naming the device", err)
		}
	})
}

// An operator's retirement waits for the retirement wipe (or, with
// --no-wipe, records NOT WIPED) exactly when the device may hold a
// tenant's data: in use, quarantined, reserved and not returned, used
// since its last clean as the store knows, or holding a failed-cleaning
// verdict in the store. A clean, unused device, or one whose only open
// quarantine is a retirement, needs no wipe.
func TestOperatorRetireWipe(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		dev     func(d *placement.Device)
		records operatorRecords
		dirty   bool
	}{
		"clean, never used":       {dev: func(d *placement.Device) {}},
		"in use":                  {dev: func(d *placement.Device) { d.Consumers = []string{"inst-a"} }, dirty: true},
		"used, no consumer named": {dev: func(d *placement.Device) { d.Used = 1 }, dirty: true},
		"quarantined":             {dev: func(d *placement.Device) { d.Quarantined = true }, dirty: true},
		"reserved, not returned":  {dev: func(d *placement.Device) { d.Inventory.Reserved = 1 }, dirty: true},
		"tenant since last clean": {dev: func(d *placement.Device) {}, records: operatorRecords{tenant: true}, dirty: true},
		"failed verdict in store": {dev: func(d *placement.Device) {}, records: operatorRecords{quarantine: &claims.Quarantine{RunID: "run-9"}}, dirty: true},
		"retired in store only":   {dev: func(d *placement.Device) {}, records: operatorRecords{quarantine: &claims.Quarantine{Reason: "RMA"}}},
	}
	for name, tt := range tests {
		for _, noWipe := range []bool{false, true} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				op := handlers.Operator{Records: tt.records, Host: "cmp1"}
				wipe, note, err := op.RetireWipe(context.Background(), operatorDevice(tt.dev), noWipe)
				if err != nil {
					t.Fatal(err)
				}
				want := ""
				switch {
				case tt.dirty && noWipe:
					want = claims.WipeDeclined
				case tt.dirty:
					want = claims.WipePending
				}
				if wipe != want {
					t.Fatalf("noWipe=%v: wipe %q, want %q (note %q)", noWipe, wipe, want, note)
				}
				if note == "" {
					t.Fatal("no note for the retirement's reason")
				}
			})
		}
	}
	t.Run("store down", func(t *testing.T) {
		t.Parallel()
		op := handlers.Operator{Records: operatorRecords{err: errors.New("db down")}, Host: "cmp1"}
		_, _, err := op.RetireWipe(context.Background(), operatorDevice(func(d *placement.Device) {}), false)
		if err == nil || !strings.Contains(err.Error(), "not retired") || !strings.Contains(err.Error(), "0000:81:00.0") {
			t.Fatalf("retire with the claims store down: got %v, want a refusal naming the device", err)
		}
	})
}

// A cleaned record waiting for its un-reserve is settled from what
// Placement shows now: reserved=total means scour's un-reserve did not
// land (the record stays open for it), an allocation means the device
// went back and was taken; a read that fails settles nothing.
func TestDeviceNowForSettleReturns(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		dev  func(d *placement.Device)
		want claims.DeviceNow
	}{
		"un-reserved, free": {dev: func(d *placement.Device) {}},
		"still reserved":    {dev: func(d *placement.Device) { d.Inventory.Reserved = 1 }, want: claims.DeviceNow{Reserved: true}},
		"taken since":       {dev: func(d *placement.Device) { d.Used, d.Consumers = 1, []string{"inst-b"} }, want: claims.DeviceNow{Allocated: true}},
		"consumer only":     {dev: func(d *placement.Device) { d.Consumers = []string{"inst-b"} }, want: claims.DeviceNow{Allocated: true}},
		"reserved and held": {dev: func(d *placement.Device) { d.Inventory.Reserved, d.Used = 1, 1 }, want: claims.DeviceNow{Reserved: true, Allocated: true}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			look := handlers.DeviceNow(func(_ context.Context, ref placement.Ref) (placement.Device, error) {
				if ref.UUID != "rp-1" {
					t.Errorf("read %q, want rp-1", ref.UUID)
				}
				return operatorDevice(tt.dev), nil
			})
			got, err := look(context.Background(), "rp-1")
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	t.Run("read fails", func(t *testing.T) {
		t.Parallel()
		look := handlers.DeviceNow(func(context.Context, placement.Ref) (placement.Device, error) {
			return placement.Device{}, errors.New("placement down")
		})
		if _, err := look(context.Background(), "rp-1"); err == nil {
			t.Fatal("a failed Placement read settled a record")
		}
	})
}

// scourctl retire says what the device is now and what its retirement
// waits for: a quarantine that stands says what it is and where its
// retirement wipe is, instead of only "that reason stands"; a new
// retirement says whether it still serves an instance and whether it is
// wiped first, NOT WIPED, or needs no wipe.
func TestRetireReportSaysItsWipeState(t *testing.T) {
	t.Parallel()
	free := operatorDevice(func(d *placement.Device) {})
	held := operatorDevice(func(d *placement.Device) { d.Consumers = []string{"inst-a"} })
	for _, tc := range []struct {
		d       placement.Device
		outcome claims.RetireOutcome
		q       claims.Quarantine
		wipe    string
		want    []string
	}{
		{free, claims.RetireStands, claims.Quarantine{Reason: "retired by alice: RMA; wipe pending", Wipe: claims.WipePending}, "", []string{"already retired", "retirement wipe is pending"}},
		{free, claims.RetireStands, claims.Quarantine{Reason: "retired by alice: shred", Wipe: claims.WipeDeclined}, "", []string{"already retired", "NOT WIPED"}},
		{free, claims.RetireStands, claims.Quarantine{RunID: "run-7", Reason: "sanitize failed; retired by alice: RMA", Wipe: claims.WipePending}, "", []string{"quarantined by run run-7", "retirement wipe is pending"}},
		{free, claims.RetireStands, claims.Quarantine{Reason: "retired by alice: RMA; retirement run r: RETIRED UNWIPED"}, "", []string{"already retired", "RETIRED UNWIPED", "no retirement wipe waits"}},
		{held, claims.RetireCreated, claims.Quarantine{}, claims.WipePending, []string{"is retired", "in use by inst-a", "retirement wipe first"}},
		{free, claims.RetireCreated, claims.Quarantine{}, claims.WipeDeclined, []string{"is retired", "NOT WIPED (operator chose --no-wipe)"}},
		{free, claims.RetireRecordedOnQuarantine, claims.Quarantine{RunID: "run-7", Reason: "sanitize failed"}, claims.WipePending, []string{"already quarantined (sanitize failed)", "retirement wipe first"}},
		{free, claims.RetireCreated, claims.Quarantine{}, "", []string{"is retired", "the note"}},
		// Decided "no wipe", but the store knew of a tenant since.
		{free, claims.RetireCreated, claims.Quarantine{Reason: "retired by alice: RMA; consumer inst-r held the device after this retirement's wipe was decided", Wipe: claims.WipePending}, "", []string{"is retired", "retirement wipe first"}},
	} {
		got := handlers.RetireReport(tc.d, tc.outcome, tc.q, tc.wipe, "the note")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("RetireReport(%v, %+v, %q) = %q; want it to say %q", tc.outcome, tc.q, tc.wipe, got, w)
			}
		}
		if (len(tc.d.Consumers) > 0) != strings.Contains(got, "in use by") {
			t.Errorf("RetireReport(%v, %+v) = %q: says in use for a device with consumers %v", tc.outcome, tc.q, got, tc.d.Consumers)
		}
	}
}

// Review rev5 F9: scourctl clean while a run's un-reserve PUT is in
// flight. Reserve reads reserved = total and writes nothing, then the PUT
// lands and the device is back in the pool (cleaned by that run): the
// answer must not say it is reserved and cleaned now. Nor after a run
// that started and ended around Reserve. With no run in flight it is
// reserved and cleaned now, and one backing off after a failed run is
// cleaned when its backoff ends.
func TestOperatorCleanReportDuringARun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	dev := operatorDevice(func(d *placement.Device) { d.Inventory.Reserved = 1 })
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	sent, land := make(chan struct{}), make(chan struct{})
	e.p.UnreserveF = func(ctx context.Context, d handlers.Device) error {
		close(sent)
		<-land
		return e.w.Unreserve(ctx, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.r.Scan(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	<-sent // the run's PUT is in flight
	before := e.r.RunMark(rp(1))
	// Reserve: reserved 1/1, nothing written; then the PUT lands.
	close(land)
	if err := e.r.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	after := e.r.RunMark(rp(1))
	if got := e.state(1); got != placement.StateAvailable {
		t.Fatalf("device %s after the run's PUT landed; want available", got)
	}
	if msg := handlers.CleanReport(dev, before, after); strings.Contains(msg, "is reserved") || !strings.Contains(msg, "was being cleaned by scourd already") {
		t.Errorf("clean with the run's un-reserve in flight answers %q; the device is back in the pool", msg)
	}

	quiet := e.r.RunMark(rp(1))
	if msg := handlers.CleanReport(dev, quiet, quiet); !strings.Contains(msg, "is reserved and scourd cleans it now") {
		t.Errorf("clean with no run in flight answers %q", msg)
	}
	e.p.UnreserveF = nil
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.reconcile() // a whole run between the two marks
	if msg := handlers.CleanReport(dev, quiet, e.r.RunMark(rp(1))); strings.Contains(msg, "is reserved") {
		t.Errorf("clean around a whole run answers %q", msg)
	}

	e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
		return handlers.CleanResult{Verdict: pipeline.VerdictRetryLater, RunID: "run-3"}, nil
	}
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 1 })
	e.reconcile()
	m := e.r.RunMark(rp(1))
	if msg := handlers.CleanReport(dev, m, m); m.BackoffUntil.IsZero() || strings.Contains(msg, "cleans it now") ||
		!strings.Contains(msg, "when its backoff ends, at "+m.BackoffUntil.UTC().Format(time.RFC3339)) {
		t.Errorf("clean of a device backing off answers %q (backoff until %v)", msg, m.BackoffUntil)
	}
}
