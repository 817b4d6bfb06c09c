package handlerstore

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/handlers/handlerstest"
	"github.com/scour-project/scour/hardware"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// view is what both implementations must agree on (ids and timestamps
// are each store's own).
type view struct {
	Instance     string
	ResizeTarget bool
	State        handlers.ClaimState
	Devices      []handlers.ClaimDevice
	Volumes      handlers.Volumes
	Project      string
}

func views(cs []handlers.Claim) []view {
	var out []view
	for _, c := range cs {
		if c.Volumes.Attached == nil {
			c.Volumes.Attached = []handlers.Volume{}
		}
		out = append(out, view{c.InstanceUUID, c.ResizeTarget, c.State, c.Devices, c.Volumes, c.ProjectID})
	}
	return out
}

func dev(rp string, n int) handlers.ClaimDevice {
	return handlers.ClaimDevice{RPUUID: rp, RPName: "compute-1_" + rp, Address: hardware.Address(fmt.Sprintf("0000:%02x:00.0", 0x80+n)), ResourceClass: "CUSTOM_NVME"}
}

// TestMatchesHandlersFake runs one history of notifications through the
// handlers' in-memory fake and through the real store, and requires the
// same claims after every step: the handlers' tests against the fake then
// hold for the service.
func TestMatchesHandlersFake(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	st, err := claims.Open(ctx, claims.Config{StatePath: filepath.Join(t.TempDir(), "state")},
		claims.WithClock(clk.Now), claims.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	real := &Claims{Store: st, Host: "compute-1"}
	fake := &handlerstest.Claims{Now: clk.Now}

	claim := func(inst string, target bool, msg string, devs ...handlers.ClaimDevice) handlers.Claim {
		return handlers.Claim{Host: "compute-1", Node: "compute-1", InstanceUUID: inst, ProjectID: "proj-" + inst, VCPU: 2,
			Devices: devs, ResizeTarget: target, MessageID: msg}
	}
	backed := func(_ context.Context, inst string) (bool, error) { return inst == "inst-c", nil }
	steps := []struct {
		name string
		do   func(c handlers.Claims) (any, error)
	}{
		{"claim", func(c handlers.Claims) (any, error) {
			return nil, c.RecordClaim(ctx, claim("inst-a", false, "a1", dev("rp-1", 1)))
		}},
		{"replay", func(c handlers.Claims) (any, error) {
			return nil, c.RecordClaim(ctx, claim("inst-a", false, "a1", dev("rp-1", 1)))
		}},
		{"resize target", func(c handlers.Claims) (any, error) {
			return nil, c.RecordClaim(ctx, claim("inst-a", true, "a2", dev("rp-2", 2)))
		}},
		{"attach device", func(c handlers.Claims) (any, error) {
			return nil, c.RecordClaim(ctx, claim("inst-a", false, "a3", dev("rp-1", 1), dev("rp-3", 3)))
		}},
		{"volume attach", func(c handlers.Claims) (any, error) {
			return nil, c.UpdateVolumes(ctx, "inst-a", func(v *handlers.Volumes) { v.Attached = append(v.Attached, handlers.Volume{ID: "vol-1", IsRoot: true}) })
		}},
		{"second instance", func(c handlers.Claims) (any, error) {
			return nil, c.RecordClaim(ctx, claim("inst-b", false, "b1", dev("rp-4", 4)))
		}},
		{"third instance", func(c handlers.Claims) (any, error) {
			return nil, c.RecordClaim(ctx, claim("inst-c", false, "c1", dev("rp-5", 5)))
		}},
		{"shelve offload", func(c handlers.Claims) (any, error) { return nil, c.MarkDormant(ctx, "inst-b", "b2") }},
		{"root detach", func(c handlers.Claims) (any, error) {
			return nil, c.UpdateVolumes(ctx, "inst-b", func(v *handlers.Volumes) { v.RootDetached = true })
		}},
		{"resize confirm", func(c handlers.Claims) (any, error) {
			return nil, c.ReleaseClaim(ctx, "inst-a", false, "resize_confirm.end", "a4")
		}},
		{"early sweep", func(c handlers.Claims) (any, error) { return c.SweepOrphans(ctx, backed) }},
		{"sweep after expiry", func(c handlers.Claims) (any, error) {
			if c == handlers.Claims(real) {
				clk.Add(301 * time.Second) // once for both implementations
			}
			return c.SweepOrphans(ctx, backed)
		}},
		{"unshelve", func(c handlers.Claims) (any, error) { return nil, c.Reactivate(ctx, "inst-b", "b3") }},
		{"volumes without claim", func(c handlers.Claims) (any, error) {
			return nil, c.UpdateVolumes(ctx, "inst-none", func(v *handlers.Volumes) { v.RootDetached = true })
		}},
		{"previous tenant of rp-1: its newest claim", func(c handlers.Claims) (any, error) {
			t, ok, err := c.PreviousTenant(ctx, "rp-1")
			return fmt.Sprint(ok, t), err
		}},
		{"scan sees a consumer without a claim on rp-1", func(c handlers.Claims) (any, error) { return nil, c.SawHolder(ctx, "rp-1", "inst-silent") }},
		{"same consumer seen again", func(c handlers.Claims) (any, error) { return nil, c.SawHolder(ctx, "rp-1", "inst-silent") }},
		{"previous tenant of rp-1: the consumer seen last", func(c handlers.Claims) (any, error) {
			t, ok, err := c.PreviousTenant(ctx, "rp-1")
			return fmt.Sprint(ok, t), err
		}},
		{"a later claim on rp-1", func(c handlers.Claims) (any, error) {
			return nil, c.RecordClaim(ctx, handlers.Claim{InstanceUUID: "inst-later", ProjectID: "p-later", MessageID: "l1",
				Devices: []handlers.ClaimDevice{{RPUUID: "rp-1", Address: "0000:81:00.0"}}})
		}},
		{"previous tenant of rp-1: the later claim", func(c handlers.Claims) (any, error) {
			t, ok, err := c.PreviousTenant(ctx, "rp-1")
			return fmt.Sprint(ok, t), err
		}},
		{"previous tenant of a device nobody held", func(c handlers.Claims) (any, error) {
			t, ok, err := c.PreviousTenant(ctx, "rp-none")
			return fmt.Sprint(ok, t), err
		}},
	}
	// The real store runs each step first so the clock moves before the fake's turn.
	impls := []handlers.Claims{real, fake}
	for _, s := range steps {
		clk.Add(time.Second) // distinct creation times: both order by them
		var results [2]any
		var states [2][]view
		for i, c := range impls {
			r, err := s.do(c)
			if err != nil {
				t.Fatalf("%s: %T: %v", s.name, c, err)
			}
			results[i] = r
			var all []handlers.Claim
			for _, inst := range []string{"inst-a", "inst-b", "inst-c"} {
				cs, err := c.ClaimsForInstance(ctx, inst)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, cs...)
			}
			live, _ := c.LiveClaims(ctx)
			states[i] = append(views(all), views(live)...)
		}
		if diff := cmp.Diff(results[1], results[0]); diff != "" {
			t.Fatalf("%s: results differ (-fake +store):\n%s", s.name, diff)
		}
		if diff := cmp.Diff(states[1], states[0]); diff != "" {
			t.Fatalf("%s: claims differ (-fake +store):\n%s", s.name, diff)
		}
	}
	// The sweep really orphaned something (the comparison is not vacuous).
	cs, _ := real.ClaimsForInstance(ctx, "inst-a")
	if len(cs) != 2 || cs[1].State != handlers.ClaimOrphaned || cs[0].State != handlers.ClaimReleased {
		t.Fatalf("inst-a claims = %+v", views(cs))
	}
}
