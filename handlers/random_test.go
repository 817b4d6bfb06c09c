package handlers_test

import (
	"context"
	"fmt"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
	"math/rand/v2"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// From random histories, with random subsets of the notifications
// delivered (lost, duplicated, reordered, late) and scans that may or may
// not happen while instances run, the handlers plus the reconciler always
// end in the same place: every allocated device burned and never cleaned;
// every freed device that scour could know was used (Nova burned it, or
// scour saw the instance through an event or a scan) cleaned and returned
// exactly once. A device Nova did not burn and that was freed before scour
// saw it at all is indistinguishable from an unused one (pre-2025.2 Nova;
// see docs/lifecycle.md).
func TestRandomHistoriesConverge(t *testing.T) {
	t.Parallel()
	for seed := range uint64(100) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 1))
			const n = 12
			e := newEnv(t, n, nil)
			e.cl.CleanF = func(ctx context.Context, req handlers.CleanRequest) (handlers.CleanResult, error) {
				if e.w.Device(req.Device.RPUUID).InUse() {
					t.Errorf("clean started for allocated %s", req.Device.RPUUID)
					return handlers.CleanResult{Verdict: pipeline.VerdictAborted}, nil
				}
				return handlers.CleanResult{Verdict: pipeline.VerdictClean}, nil
			}
			vm := func(i int) string { return fmt.Sprintf("00000000-0000-4000-9000-%012d", i) }
			seen := map[int]bool{} // scour burned it or Nova did
			var late []*command.Command
			for i := 1; i <= n; i++ {
				burn := rng.IntN(2) == 0
				e.w.Allocate(vm(i), burn, rp(i))
				seen[i] = burn
			}
			for _, c := range deliveries(rng, n, func(i int) *command.Command {
				return cmd(command.KindClaim, "instance.create.end", vm(i))
			}, &late) {
				e.handle(c)
				seen[idx(c)] = true
			}
			if rng.IntN(2) == 0 { // a periodic scan while everything runs
				e.reconcile()
				for i := 1; i <= n; i++ {
					seen[i] = true
				}
			}
			deleted := map[int]bool{}
			for i := 1; i <= n; i++ {
				if rng.IntN(2) == 0 {
					e.w.Free(vm(i))
					deleted[i] = true
				}
			}
			dels := deliveries(rng, n, func(i int) *command.Command {
				if !deleted[i] {
					return cmd(command.KindRelease, "forged", vm(i))
				}
				return cmd(command.KindRelease, "instance.delete.end", vm(i))
			}, nil)
			dels = append(dels, late...)
			rng.Shuffle(len(dels), func(i, j int) { dels[i], dels[j] = dels[j], dels[i] })
			for _, c := range dels {
				e.handle(c)
			}
			e.reconcile()
			e.reconcile()
			for i := 1; i <= n; i++ {
				switch {
				case !deleted[i]:
					e.wantDevice(i, placement.StateBurnedInUse, 0, 0)
				case seen[i]:
					e.wantDevice(i, placement.StateAvailable, 1, 1)
				default:
					e.wantDevice(i, placement.StateAvailable, 0, 0)
				}
			}
		})
	}
}

// deliveries returns, for each of n instances, its command 0 (lost), 1 or
// 2 (duplicate) times in random order; some go to *late instead when late
// is not nil (delivered only after later events).
func deliveries(rng *rand.Rand, n int, mk func(int) *command.Command, late *[]*command.Command) []*command.Command {
	var out []*command.Command
	for i := 1; i <= n; i++ {
		for range rng.IntN(3) {
			if late != nil && rng.IntN(4) == 0 {
				*late = append(*late, mk(i))
				continue
			}
			out = append(out, mk(i))
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func idx(c *command.Command) int {
	var i int
	fmt.Sscanf(c.InstanceUUID, "00000000-0000-4000-9000-%012d", &i)
	return i
}
