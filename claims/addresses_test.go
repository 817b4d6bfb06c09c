package claims

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A device's provider re-created with a new UUID at the same address on
// the same host keeps the device's history: the tenant known under the
// old provider since its last clean is the new provider's previous
// tenant, until a clean of either ends it. Another host's provider at
// the same address is another device.
func TestPreviousTenantFollowsTheAddress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(s.SawAddress(ctx, "compute-1", "rp-old", "0000:81:00.0"))
		must(s.SawAddress(ctx, "compute-2", "rp-other-host", "0000:81:00.0"))
		must(s.SawHolder(ctx, "compute-1", "rp-old", "inst-a"))
		clock.Advance(time.Minute)
		must(s.SawAddress(ctx, "compute-1", "rp-new", "0000:81:00.0"))
		p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-new")
		if err != nil || !ok || p.Instance != "inst-a" || p.DeviceRP != "rp-old" {
			t.Fatalf("re-created provider: %+v %v %v; want inst-a, known under rp-old", p, ok, err)
		}
		if p, ok, err := s.PreviousTenant(ctx, "compute-2", "rp-other-host"); err != nil || ok {
			t.Fatalf("another host's device at the same address: %+v %v %v; want none", p, ok, err)
		}
		clock.Advance(time.Minute)
		cleanedRun(t, s, "rp-new")
		clock.Advance(time.Minute)
		for _, rp := range []string{"rp-new", "rp-old"} {
			if p, ok, err := s.PreviousTenant(ctx, "compute-1", rp); err != nil || ok {
				t.Fatalf("%s after the new provider's clean: %+v %v %v; want none", rp, p, ok, err)
			}
		}
		// A tenant of the new provider is named under it.
		must(s.SawHolder(ctx, "compute-1", "rp-new", "inst-b"))
		if p, ok, err := s.PreviousTenant(ctx, "compute-1", "rp-new"); err != nil || !ok || p.Instance != "inst-b" || p.DeviceRP != "rp-new" {
			t.Fatalf("tenant of the new provider: %+v %v %v; want inst-b under rp-new", p, ok, err)
		}
	})
}

// An open quarantine follows the device to its re-created provider (the
// reason says so); it does not move to a provider at another address,
// and closes when the new provider has its own.
func TestReattachQuarantine(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		if _, _, err := s.Retire(ctx, "compute-1", "rp-old", "", "alice", "RMA", "", ""); err != nil {
			t.Fatal(err)
		}
		if err := s.SawAddress(ctx, "compute-1", "rp-old", "0000:81:00.0"); err != nil {
			t.Fatal(err)
		}
		open, err := s.OpenQuarantines(ctx, "compute-1")
		if err != nil || len(open) != 1 || open[0].Address != "0000:81:00.0" {
			t.Fatalf("open quarantines: %+v, %v; want rp-old's, at the address its provider was seen at", open, err)
		}
		if moved, err := s.ReattachQuarantine(ctx, "compute-1", "rp-old", "rp-elsewhere", "0000:82:00.0"); err != nil || moved {
			t.Fatalf("reattach to another address: %v, %v; want nothing moved", moved, err)
		}
		if moved, err := s.ReattachQuarantine(ctx, "compute-1", "rp-old", "rp-new", "0000:81:00.0"); err != nil || !moved {
			t.Fatalf("reattach: %v, %v", moved, err)
		}
		q, ok, err := s.ActiveQuarantine(ctx, "compute-1", "rp-new")
		if err != nil || !ok || !q.Retired() || !strings.Contains(q.Reason, "RMA") || !strings.Contains(q.Reason, "was rp-old") {
			t.Fatalf("new provider's quarantine: %+v %v %v", q, ok, err)
		}
		if _, ok, _ := s.ActiveQuarantine(ctx, "compute-1", "rp-old"); ok {
			t.Fatal("old provider still quarantined")
		}
		// The new provider quarantined already: the old row closes.
		if _, _, err := s.Retire(ctx, "compute-1", "rp-old", "0000:81:00.0", "alice", "again", "", ""); err != nil {
			t.Fatal(err)
		}
		if moved, err := s.ReattachQuarantine(ctx, "compute-1", "rp-old", "rp-new", "0000:81:00.0"); err != nil || !moved {
			t.Fatalf("reattach onto an open quarantine: %v, %v", moved, err)
		}
		open, _ = s.OpenQuarantines(ctx, "compute-1")
		if len(open) != 1 || open[0].DeviceRP != "rp-new" {
			t.Fatalf("open quarantines after the second reattach: %+v; want rp-new's only", open)
		}
	})
}
