package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

func TestOneRunPerDevice(t *testing.T) {
	h := newHarness(t, testConfig(pluginStep("a")))
	entered, release := make(chan struct{}), make(chan struct{})
	h.pr.clean["a"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		close(entered)
		<-release
		return plugins.OK(nil), nil
	}
	done := make(chan *Result)
	go func() { done <- h.clean(t, target(1)) }()
	<-entered
	var wg sync.WaitGroup
	var refused atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.e.Clean(context.Background(), target(1)); errors.Is(err, ErrAlreadyRunning) {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	close(release)
	if res := <-done; res.Verdict != VerdictClean {
		t.Fatalf("first run: %v", res)
	}
	if refused.Load() != 8 {
		t.Fatalf("%d of 8 concurrent runs for the same device were refused", refused.Load())
	}
	if got := len(h.cp.Runs(string(target(1).Address))); got != 1 {
		t.Fatalf("%d runs stored, want 1", got)
	}
}

// Host limit 3, profile "nvme" limit 1: at most one nvme and three runs in
// all at once, and the limits are reached (runs really are parallel).
func TestConcurrencyLimits(t *testing.T) {
	cfg := testConfig(pluginStep("a"))
	cfg.MaxConcurrent = 3
	cfg.Profiles[0].MaxConcurrent = 1
	cfg.Profiles = append(cfg.Profiles, Profile{Name: "gpu", Match: Match{ResourceClasses: []string{"CUSTOM_GPU"}},
		Pipeline: Pipeline{Name: "gpu", Steps: []Step{pluginStep("a")}}})
	h := newHarness(t, cfg)
	var mu sync.Mutex
	cur := map[string]int{}
	peak := map[string]int{}
	release := make(chan struct{})
	h.pr.clean["a"] = func(_ context.Context, req *plugins.Request) (*plugins.Result, error) {
		rc := req.Device.ResourceClasses[0]
		mu.Lock()
		cur[rc]++
		cur["all"]++
		for _, k := range []string{rc, "all"} {
			peak[k] = max(peak[k], cur[k])
		}
		mu.Unlock()
		<-release
		mu.Lock()
		cur[rc]--
		cur["all"]--
		mu.Unlock()
		return plugins.OK(nil), nil
	}
	var wg sync.WaitGroup
	for i := range 8 {
		tg := target(i + 1)
		if i%2 == 0 {
			tg.ResourceClass = "CUSTOM_GPU"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := h.clean(t, tg); res.Verdict != VerdictClean {
				t.Errorf("%s: %v", tg.Address, res)
			}
		}()
	}
	// Wait until the host limit is reached, give others time to (wrongly)
	// get in, then let everything finish one by one.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := cur["all"]
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d runs in parallel, want 3", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	go func() {
		for range 8 {
			release <- struct{}{}
		}
	}()
	wg.Wait()
	// gpu reaches 2 or 3 depending on whether an nvme run held a slot.
	if peak["all"] != 3 || peak["CUSTOM_NVME"] != 1 || peak["CUSTOM_GPU"] < 2 {
		t.Fatalf("peaks %v; want all=3 nvme=1 gpu>=2", peak)
	}
}

// In-device steps are bounded only by the run limit; host-bound steps
// (plugins by default) share max_host_bound_steps slots.
func TestHostBoundStepLimit(t *testing.T) {
	for _, tc := range []struct {
		inDevice bool
		want     int
	}{{true, 6}, {false, 2}} {
		cfg := testConfig(pluginStep("a", func(s *Step) { s.InDevice = &tc.inDevice }))
		cfg.MaxConcurrent, cfg.MaxHostBoundSteps = 8, 2
		h := newHarness(t, cfg)
		var cur, peak atomic.Int32
		release := make(chan struct{})
		h.pr.clean["a"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
			n := cur.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
			cur.Add(-1)
			return plugins.OK(nil), nil
		}
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res := h.clean(t, target(i+1)); res.Verdict != VerdictClean {
					t.Errorf("%v", res)
				}
			}()
		}
		deadline := time.Now().Add(10 * time.Second)
		for cur.Load() < int32(tc.want) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // room for a wrong extra step to start
		close(release)
		wg.Wait()
		if got := peak.Load(); got != int32(tc.want) {
			t.Errorf("in_device=%v: %d steps at once, want %d", tc.inDevice, got, tc.want)
		}
	}
}

// A destructive host-bound step that waited for a slot asks Placement
// again once it holds one: the check made before the wait is as old as the
// wait, and the device may have been allocated meanwhile (rule 2).
func TestDestructiveStepRechecksAfterWaitingForASlot(t *testing.T) {
	for _, allocatedWhileWaiting := range []bool{true, false} {
		t.Run(fmt.Sprintf("allocated=%v", allocatedWhileWaiting), func(t *testing.T) {
			cfg := testConfig(pluginStep("wipe"))
			cfg.MaxConcurrent, cfg.MaxHostBoundSteps = 4, 1
			var mu sync.Mutex
			asked := map[string]int{}
			allocated := map[string]bool{}
			h := newHarness(t, cfg, func(h *harness) {
				h.alloc = func(_ context.Context, rp string) (bool, error) {
					mu.Lock()
					defer mu.Unlock()
					asked[rp]++
					return allocated[rp], nil
				}
			})
			started := make(chan string, 2)
			release := make(chan struct{})
			h.pr.clean["wipe"] = func(_ context.Context, req *plugins.Request) (*plugins.Result, error) {
				started <- req.Device.Address
				<-release
				return plugins.OK(nil), nil
			}
			first := make(chan *Result, 1)
			go func() { first <- h.clean(t, target(1)) }()
			if got := <-started; got != string(target(1).Address) {
				t.Fatalf("first step ran on %s", got)
			}
			second := make(chan *Result, 1)
			go func() { second <- h.clean(t, target(2)) }()
			// rp-2 passed its check and now waits for rp-1's slot.
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := asked["rp-2"]
				if n == 1 {
					allocated["rp-2"] = allocatedWhileWaiting
				}
				mu.Unlock()
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the second run never asked Placement")
				}
				time.Sleep(2 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // let it reach the slot wait
			close(release)
			if res := <-first; res.Verdict != VerdictClean {
				t.Fatalf("first run: %v", res)
			}
			res := <-second
			mu.Lock()
			n := asked["rp-2"]
			mu.Unlock()
			if n != 2 {
				t.Errorf("Placement asked %d times about rp-2, want 2 (before and after the wait)", n)
			}
			if allocatedWhileWaiting {
				if res.Verdict != VerdictAborted || res.Step != "wipe" {
					t.Fatalf("second run: %v; want aborted at wipe", res)
				}
				select {
				case a := <-started:
					t.Fatalf("the destructive step ran on %s although Placement showed it allocated", a)
				default:
				}
				return
			}
			if res.Verdict != VerdictClean {
				t.Fatalf("second run: %v", res)
			}
		})
	}
}

// nvme-erase works inside the device and takes no host-bound slot, but its
// overwrite fallback (a drive without Sanitize or Format) streams the
// whole drive through the host: it waits for one of max_host_bound_steps
// slots like an overwrite step, holds it while it writes, and, having
// waited, asks Placement again before writing (rule 2).
func TestEraseOverwriteFallbackWaitsForAHostSlot(t *testing.T) {
	for _, allocatedWhileWaiting := range []bool{false, true} {
		t.Run(fmt.Sprintf("allocated=%v", allocatedWhileWaiting), func(t *testing.T) {
			cfg := testConfig(Step{Name: "erase", Type: "nvme-erase", Retry: Retry{Attempts: 3, Backoff: time.Millisecond}})
			cfg.MaxHostBoundSteps = 1
			media := filepath.Join(t.TempDir(), "nvme0n1")
			if err := os.WriteFile(media, bytes.Repeat([]byte{0xa5}, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			asked, allocated := 0, false
			waiting := make(chan struct{})
			h := newHarness(t, cfg, func(h *harness) {
				h.alloc = func(context.Context, string) (bool, error) {
					mu.Lock()
					defer mu.Unlock()
					asked++
					return allocated, nil
				}
			})
			h.e.slotWaiting = func() { close(waiting) }
			h.be.DiscoverF = func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
				d := nvmeDevice(a)
				d.Driver = "nvme"
				d.NVMe = &hardware.NVMeInfo{Controller: "nvme0", Namespaces: []string{media}} // no sanitize, no format
				return d, nil
			}
			heldWhileWriting := false
			h.be.MediaF = func(context.Context, hardware.Address) ([]hardware.Media, error) {
				heldWhileWriting = len(h.e.hostBound) == 1
				return []hardware.Media{{Path: media, Size: 1 << 20}}, nil
			}
			h.e.hostBound <- struct{}{} // another device's overwrite holds the only slot
			done := make(chan *Result, 1)
			go func() { done <- h.clean(t, target(1)) }()
			select {
			case <-waiting: // the erase fell back to overwriting and waits for the slot
			case res := <-done:
				b, _ := os.ReadFile(media)
				t.Fatalf("the erase ended (%s, %s) without waiting for the host-bound slot; media wiped: %v", res.Verdict, res.Reason, len(bytes.Trim(b, "\x00")) == 0)
			}
			mu.Lock()
			if asked != 1 {
				t.Errorf("Placement asked %d times before the erase, want 1", asked)
			}
			allocated = allocatedWhileWaiting
			mu.Unlock()
			<-h.e.hostBound
			res := <-done
			b, _ := os.ReadFile(media)
			wiped := len(bytes.Trim(b, "\x00")) == 0
			mu.Lock()
			defer mu.Unlock()
			if asked != 2 {
				t.Errorf("Placement asked %d times, want 2 (before the erase, and before the overwrite it waited for)", asked)
			}
			if allocatedWhileWaiting {
				if res.Verdict != VerdictAborted || wiped {
					t.Fatalf("allocated while waiting: verdict %s (%s), media wiped %v; want aborted, untouched", res.Verdict, res.Reason, wiped)
				}
				return
			}
			if res.Verdict != VerdictClean || !wiped || !heldWhileWriting {
				t.Fatalf("verdict %s (%s), media wiped %v, slot held while writing %v", res.Verdict, res.Reason, wiped, heldWhileWriting)
			}
		})
	}
}
