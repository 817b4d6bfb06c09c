package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// Scenarios across two compute hosts (moves), crashes, races with Nova and
// a broker restart. Each host is a real scourd on simulated hardware; Nova
// is played through the harness (Placement writes, then the notification
// Nova emits at that point, from Nova's own samples).

const (
	addrA = "0000:81:00.0" // the instance's device on the source host A
	addrB = "0000:a1:00.0" // its device on the destination host B
	addrN = "0000:a2:00.0" // a neighbour on B nobody uses
)

// twoHosts returns a source host A with one device and a destination B
// with two; only notifications drive them (hour-long reconcile interval).
func twoHosts(t *testing.T, c *Cloud) (a, b *Host) {
	t.Helper()
	a = c.AddHost(t, []SimDevice{{Address: addrA}}, WithReconcileInterval(time.Hour))
	b = c.AddHost(t, []SimDevice{{Address: addrB}, {Address: addrN}}, WithReconcileInterval(time.Hour))
	return a, b
}

// bootOnA boots inst on A with its device burned and waits until A's
// scourd recorded the claim.
func bootOnA(t *testing.T, c *Cloud, a *Host, inst string) {
	t.Helper()
	c.Boot(t, a, inst, harness.Versioned, addrA)
	waitClaim(t, a, inst)
	if a.MediaZeroed(t, addrA) {
		t.Fatal("the simulated media starts zeroed: a wipe could not be told from nothing")
	}
}

// moveToB plays the start of a move (resize or live migration) of inst from
// A to B: the source allocation goes to a migration consumer, the instance
// gets B's device (see withBurnsLifted for why the source burn is lifted
// around the POST). Nova's move claim would burn B's device too; here it
// is left unburned, so scour's claim on B must burn it. It returns the
// migration consumer.
func moveToB(t *testing.T, c *Cloud, a, b *Host, inst string) string {
	t.Helper()
	var mig string
	withBurnsLifted(t, c, []*harness.DeviceRP{a.Device(addrA)}, func() {
		mig = c.P.MoveAllocations(t, inst, b.Node, b.Device(addrB))
	})
	if r := c.Reserved(t, b.Device(addrB)); r != 0 {
		t.Fatalf("destination device reserved=%d before the claim; want 0 (scour must burn it)", r)
	}
	return mig
}

// finishResizeOnB plays resize_finish.end on the destination and waits
// until B's scourd has recorded the claim and burned the device.
func finishResizeOnB(t *testing.T, c *Cloud, b *Host, inst string, f harness.Format) {
	t.Helper()
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.resize_finish.end", InstanceUUID: inst,
		Host: b.Name, Node: b.Name}, f)
	waitClaim(t, b, inst)
	Eventually(t, 30*time.Second, "destination device burned by scour's claim", func() (bool, string) {
		r := c.Reserved(t, b.Device(addrB))
		return r == 1, fmt.Sprintf("reserved=%d", r)
	})
}

// The destination's claim (resize_finish.end on B) burns and records B's
// device; confirm (migration allocation dropped, resize_confirm.end from A)
// cleans and returns A's device, while B's stays in use.
func TestResizeConfirmAcrossHosts(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	a, b := twoHosts(t, c)
	inst := harness.NewUUID()
	bootOnA(t, c, a, inst)

	mig := moveToB(t, c, a, b, inst)
	finishResizeOnB(t, c, b, inst, harness.Versioned)
	// Until the confirm, the migration consumer holds A's device: nothing
	// may happen to it.
	if got := c.P.Allocations(t, a.Device(addrA).UUID); len(got) != 1 || got[mig] == nil {
		t.Fatalf("source device allocations %v, want the migration %s", got, mig)
	}

	// Confirm: Nova drops the migration's allocation on the source, then
	// the source compute emits resize_confirm.end (publisher A; the
	// instance's host is already B).
	c.P.DeleteAllocations(t, mig)
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.resize_confirm.end", InstanceUUID: inst,
		Host: b.Name, Node: b.Name, PublisherID: "nova-compute:" + a.Name}, harness.Versioned)
	cleanedFor(t, c, a, addrA, inst)
	waitLog(t, a, 10*time.Second, `msg="claim released"`, inst)
	stayInUse(t, c, b, addrB, inst, 3*time.Second)
	if c.Reserved(t, b.Device(addrN)) != 0 || b.Records(t, addrN) != nil {
		t.Error("B's unused neighbour device was touched")
	}
}

// Revert: Nova drops B's allocation and gives the instance its source
// device back, then emits resize_revert.end on the SOURCE (legacy format
// here). B, whose claim no allocation backs any more, cleans and returns
// its device; A keeps the instance's device untouched.
func TestResizeRevertAcrossHosts(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	a, b := twoHosts(t, c)
	resizeRevert(t, c, a, b, harness.Legacy)
}

// resizeRevert boots an instance on a, resizes it to b and reverts (the
// notifications in format f), checks that b cleans its device while a
// keeps the instance's, and returns the instance.
func resizeRevert(t *testing.T, c *Cloud, a, b *Host, f harness.Format) string {
	t.Helper()
	inst := harness.NewUUID()
	bootOnA(t, c, a, inst)

	mig := moveToB(t, c, a, b, inst)
	finishResizeOnB(t, c, b, inst, f)

	// Revert: the migration's allocations go back to the instance (A's
	// device; the same Placement limit applies, see withBurnsLifted), the
	// instance's allocation on B goes away.
	withBurnsLifted(t, c, []*harness.DeviceRP{a.Device(addrA)}, func() { c.P.RevertMove(t, inst, mig) })
	if got := c.P.Allocations(t, b.Device(addrB).UUID); len(got) != 0 {
		t.Fatalf("destination device still allocated after revert: %v", got)
	}
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.resize_revert.end", InstanceUUID: inst,
		Host: a.Name, Node: a.Name}, f)
	cleanedFor(t, c, b, addrB, inst)
	waitLog(t, b, 10*time.Second, `msg="claim released"`, inst)
	stayInUse(t, c, a, addrA, inst, 3*time.Second)
	if strings.Contains(a.Logs(), `msg="claim released"`) {
		t.Errorf("source host released the claim of the instance that lives on it again:\n%s", tail(a.Logs(), 30))
	}
	return inst
}

// Live migration A -> B: post_dest.end on B claims, post.end from A
// releases; A's device is cleaned once the migration allocation is gone,
// B's is kept.
func TestLiveMigrationAcrossHosts(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	a, b := twoHosts(t, c)
	inst := harness.NewUUID()
	bootOnA(t, c, a, inst)

	mig := moveToB(t, c, a, b, inst)
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.live_migration_post_dest.end", InstanceUUID: inst,
		Host: b.Name, Node: b.Name}, harness.Versioned)
	waitClaim(t, b, inst)
	// Nova's _post_live_migration on the source removes the migration's
	// allocation there, then emits post.end (the instance's host is B).
	c.P.DeleteAllocations(t, mig)
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.live_migration_post.end", InstanceUUID: inst,
		Host: b.Name, Node: b.Name, PublisherID: "nova-compute:" + a.Name}, harness.Versioned)
	cleanedFor(t, c, a, addrA, inst)
	stayInUse(t, c, b, addrB, inst, 3*time.Second)
}

// Evacuate while A's scourd is down: the instance moves to B, the
// allocation on A's device is removed, A's device stays burned while A is
// down, and A's scourd cleans it when it comes back (no notification tells
// it: its start scan does).
func TestEvacuateWithSourceDownThenBack(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	a, b := twoHosts(t, c)
	evacuateSourceDown(t, c, a, b, nil)
}

// evacuateSourceDown plays the evacuation of an instance booted on a
// while a's scourd is down (then is called once the evacuate is
// published) and checks that a cleans its device when it comes back.
func evacuateSourceDown(t *testing.T, c *Cloud, a, b *Host, then func(inst string)) {
	t.Helper()
	inst := harness.NewUUID()
	bootOnA(t, c, a, inst)

	a.Stop(t)
	// Nova evacuates: the instance gets resources on B and Nova burns B's
	// device at the rebuild claim. The instance's allocation on A is gone
	// (one PUT replacing the instance's allocations; Nova removes the
	// source's part when it cleans up the evacuated instance).
	reallocate(t, c.P, inst, b.Node, b.Device(addrB))
	c.P.Burn(t, b.Device(addrB))
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.evacuate", InstanceUUID: inst,
		Host: a.Name, Node: a.Name, PublisherID: "nova-api:controller"}, harness.Versioned)
	if then != nil {
		then(inst)
	}
	// nova-compute on B rebuilds the instance: rebuild.end is the claim.
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.rebuild.end", InstanceUUID: inst,
		Host: b.Name, Node: b.Name}, harness.Versioned)
	waitClaim(t, b, inst)

	// While A's scourd is down its dirty device stays reserved: nobody
	// else returns it.
	devA := a.Device(addrA)
	Never(t, 2*time.Second, "A's device while its scourd is down", func() (bool, string) {
		r := c.Reserved(t, devA)
		return r != 1, fmt.Sprintf("reserved=%d", r)
	})
	if a.MediaZeroed(t, addrA) {
		t.Fatal("A's media wiped while its scourd was down")
	}

	a.Start(t)
	cleanedFor(t, c, a, addrA, inst)
	stayInUse(t, c, b, addrB, inst, 3*time.Second)
}

// kill -9 in the middle of a sanitize: the restarted scourd resumes the
// same run, wipes the device and returns it exactly once.
func TestKillMidWipeResumesAndReturnsOnce(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	// Sanitize takes ten steps of 400ms; the default 2s reconcile interval
	// (the restart's start scan does the resume anyway).
	h := c.AddHost(t, []SimDevice{{Address: addrA}}, WithSlowWipes(400*time.Millisecond))
	dev := h.Device(addrA)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addrA)
	waitClaim(t, h, inst)
	samples := sampleReserved(t, c.P, dev)
	c.Delete(t, h, inst, harness.Versioned)

	started := waitLog(t, h, 30*time.Second, `msg="step started"`, "step=sanitize")
	run := logAttr(started, "run")
	if run == "" {
		t.Fatalf("no run id in %q", started)
	}
	time.Sleep(1200 * time.Millisecond) // a few progress steps into the sanitize
	if r := c.Reserved(t, dev); r != 1 {
		t.Fatalf("reserved=%d mid-wipe, want 1", r)
	}
	if findLine(h.Logs(), `msg="step succeeded"`, "step=sanitize") != "" {
		t.Fatalf("sanitize finished before the kill; make the wipe slower:\n%s", tail(h.Logs(), 20))
	}
	h.Kill(t)
	if r := c.Reserved(t, dev); r != 1 {
		t.Fatalf("reserved=%d after the kill, want 1", r)
	}
	killedAt := len(h.Logs())

	h.Start(t)
	c.WaitAvailable(t, h, addrA, 60*time.Second)
	after := h.Logs()[killedAt:]
	if l := findLine(after, `msg="resuming interrupted cleaning run"`); logAttr(l, "run") != run {
		t.Errorf("restart did not resume run %s: %q\nlog:\n%s", run, l, tail(after, 40))
	}
	if !h.MediaZeroed(t, addrA) {
		t.Error("device returned but its media was not wiped")
	}
	// Give a wrong second un-reserve or a second run every chance.
	Never(t, 3*time.Second, "returned device", func() (bool, string) {
		r := c.Reserved(t, dev)
		return r != 0, fmt.Sprintf("reserved=%d", r)
	})
	if seen := samples.Stop(); fmt.Sprint(seen) != "[1 0]" {
		t.Errorf("reserved went %v, want [1 0]: returned exactly once, never below 0", seen)
	}
	recs := h.Records(t, addrA)
	if len(recs) != 1 {
		t.Fatalf("want exactly 1 finished cleaning record, got %d: %v", len(recs), recs)
	}
	if got := nested(recs[0], "run_id"); got != run {
		t.Errorf("record of run %s, want the resumed run %s", got, run)
	}
	if n := countLines(h.Logs(), `msg="device returned to the pool"`); n != 1 {
		t.Errorf("device un-reserved %d times, want 1", n)
	}
}

// An allocation made on the device while scour cleans it. A burned device
// cannot be allocated (Placement gives 409), so the race is the one the
// safety rule guards against: an operator (or another agent) un-reserves
// the dirty device by hand and Nova at once allocates it to a new instance
// and burns it, while scour's run is in flight.
func TestAllocationDuringCleaning(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// the step the run is in when the allocation appears: a slow
		// non-destructive plugin step ("pause", first or last in the
		// pipeline), or a slow sanitize
		during, pause string
		// the run's verdict
		verdict string
	}{
		// the check before the first destructive step finds it: nothing wiped
		{"before the destructive step", "pause", "first", "aborted"},
		// the wipe goes on; the check before the next destructive step
		// (pci-reset) finds it
		{"mid-wipe", "sanitize", "", "aborted"},
		// every step done, verdict clean: the un-reserve re-verifies and
		// leaves the device to its new owner
		{"after the last destructive step", "pause", "last", "clean"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := NewCloud(t)
			opts := []HostOption{WithReconcileInterval(time.Hour), withSimStep(400 * time.Millisecond)}
			if tt.pause != "" {
				opts = append(opts, withPauseStep(t, 4*time.Second, tt.pause == "first"))
			}
			h := c.AddHost(t, []SimDevice{{Address: addrA}}, opts...)
			dev := h.Device(addrA)
			h.FaultFile(t, addrA, "slow", "sanitize")
			old, next := harness.NewUUID(), harness.NewUUID()
			c.Boot(t, h, old, harness.Versioned, addrA)
			waitClaim(t, h, old)
			c.Delete(t, h, old, harness.Versioned)
			waitLog(t, h, 30*time.Second, `msg="step started"`, "step="+tt.during)
			if findLine(h.Logs(), `msg="step succeeded"`, "step="+tt.during) != "" {
				t.Fatalf("step %s finished before the race; make it slower", tt.during)
			}

			// The race: un-reserved by hand, allocated to a new instance and
			// burned by Nova.
			setReserved(t, c.P, dev, 0)
			c.P.AllocateInstance(t, next, "tenant-b", "user-b", h.Node, dev)
			c.P.Burn(t, dev)
			raceAt := len(h.Logs())
			zeroedAtRace := h.MediaZeroed(t, addrA)

			finished := waitLog(t, h, 30*time.Second, `msg="cleaning run finished"`)
			if got := logAttr(finished, "verdict"); got != tt.verdict {
				t.Errorf("run ended %q, want %s: %s", got, tt.verdict, finished)
			}
			if tt.verdict == "clean" {
				waitLog(t, h, 10*time.Second, `msg="cleaned device is allocated now; not un-reserved, left alone"`)
			}
			stayOwned := func() (bool, string) {
				if r := c.Reserved(t, dev); r != 1 {
					return true, fmt.Sprintf("reserved=%d, want 1 as the new owner's Nova burned it", r)
				}
				if a := c.P.Allocations(t, dev.UUID); len(a) != 1 || a[next] == nil {
					return true, fmt.Sprintf("allocations %v, want only %s's", a, next)
				}
				return false, ""
			}
			Never(t, 3*time.Second, "device allocated to a new instance during cleaning", stayOwned)
			after := h.Logs()[raceAt:]
			if l := findLine(after, `msg="step started"`, "destructive=true"); l != "" {
				t.Errorf("a destructive step started after the allocation appeared: %s\nlog:\n%s", l, tail(after, 40))
			}
			if n := countLines(h.Logs(), `msg="device returned to the pool"`); n != 0 {
				t.Errorf("device un-reserved %d times while allocated to %s", n, next)
			}
			if tt.pause == "first" {
				if h.MediaZeroed(t, addrA) || zeroedAtRace {
					t.Error("media wiped although the allocation appeared before the destructive step")
				}
				if findLine(h.Logs(), `msg="step started"`, "step=sanitize") != "" {
					t.Error("sanitize started although the device was allocated before it")
				}
			}
		})
	}
}

// The broker restarts under a scourd consuming from it: scourd reconnects
// (readyz back) and every delete, published before and after the restart,
// is acted on.
func TestBrokerRestartLosesNoDelete(t *testing.T) {
	t.Parallel()
	// A broker of this test's own (Restart would disturb everyone sharing
	// the package's broker); same URL after the restart.
	c := &Cloud{Bus: harness.StartRabbitMQ(t, harness.Dedicated()), P: harness.StartPlacement(t)}
	devs := []SimDevice{{Address: "0000:81:00.0"}, {Address: "0000:82:00.0"}, {Address: "0000:83:00.0"}, {Address: "0000:84:00.0"}}
	// Only notifications drive this host.
	h := c.AddHost(t, devs, WithReconcileInterval(time.Hour))
	insts := map[string]string{}
	for _, d := range h.Devices {
		insts[d.Address] = harness.NewUUID()
		c.Boot(t, h, insts[d.Address], harness.Versioned, d.Address)
	}
	for _, d := range h.Devices {
		waitClaim(t, h, insts[d.Address])
	}

	before, after := h.Devices[:2], h.Devices[2:]
	for _, d := range before {
		c.Delete(t, h, insts[d.Address], harness.Versioned)
	}
	// Watch readyz through the restart: it must say "not ready" while the
	// broker is away, or it could not be trusted to say "ready" after.
	stop, sawDown := make(chan struct{}), make(chan bool)
	go func() {
		down := false
		for {
			select {
			case <-stop:
				sawDown <- down
				return
			case <-time.After(50 * time.Millisecond):
				down = down || !ready(h)
			}
		}
	}()
	t0 := time.Now()
	c.Bus.Restart(t)
	Eventually(t, 60*time.Second, "scourd ready again after the broker restart", func() (bool, string) {
		return ready(h), "readyz not 200; log tail:\n" + tail(h.Logs(), 20)
	})
	close(stop)
	if !<-sawDown {
		t.Error("readyz never reported the broker outage")
	}
	t.Logf("scourd ready %s after the restart began", time.Since(t0).Round(time.Millisecond))
	for _, d := range before {
		c.WaitAvailable(t, h, d.Address, 60*time.Second)
	}
	// Let any follow-up scan of those deletes pass, so that only the
	// notifications below can find the next devices.
	time.Sleep(2 * time.Second)
	for _, d := range after {
		if r := c.Reserved(t, h.Device(d.Address)); r != 1 {
			t.Fatalf("%s reserved=%d before its delete, want 1", d.Address, r)
		}
		c.Delete(t, h, insts[d.Address], harness.Versioned)
	}
	for _, d := range h.Devices {
		c.WaitAvailable(t, h, d.Address, 60*time.Second)
		if !h.MediaZeroed(t, d.Address) {
			t.Errorf("%s returned but not wiped", d.Address)
		}
		if n := len(h.Records(t, d.Address)); n != 1 {
			t.Errorf("%s: %d cleaning records, want 1", d.Address, n)
		}
	}
}

// Review rev3 H1 against the real Placement: during a run's last step
// (non-destructive, after its erase), someone lifts the fence, tenant X is
// allocated the device and Nova burns it, then X's allocations are
// deleted, with no notification: the store never sees X, and Placement
// shows the device reserved and free again. The run must not return it:
// its un-reserve finds the generation moved since the all-clear its erase
// started on (before the fix: a 409, a re-read showing nobody, a second
// PUT). Its record closes as not returned, and a new run cleans the
// device before it goes back.
func TestTenantDuringCleaningIsCleanedAgain(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addrA}}, WithReconcileInterval(time.Hour),
		withSimStep(400*time.Millisecond), withPauseStep(t, 4*time.Second, false))
	dev := h.Device(addrA)
	old, x := harness.NewUUID(), harness.NewUUID()
	c.Boot(t, h, old, harness.Versioned, addrA)
	waitClaim(t, h, old)
	c.Delete(t, h, old, harness.Versioned)
	run := logAttr(waitLog(t, h, 30*time.Second, `msg="step started"`, "step=pause"), "run")
	if findLine(h.Logs(), `msg="step succeeded"`, "step=pause") != "" {
		t.Fatal("the pause step finished before the tenant came; make it slower")
	}
	setReserved(t, c.P, dev, 0)
	c.P.AllocateInstance(t, x, "tenant-x", "user-x", h.Node, dev)
	c.P.Burn(t, dev)
	c.P.DeleteAllocations(t, x)

	waitLog(t, h, 30*time.Second, `msg="cleaned device may have served a tenant since this run's all-clear`)
	c.WaitAvailable(t, h, addrA, 60*time.Second)
	recs := h.Records(t, addrA) // newest first
	if len(recs) != 2 {
		t.Fatalf("records: %d, want 2 (run %s, not returned; a new one, returned)", len(recs), run)
	}
	if nested(recs[1], "run_id") != run || nested(recs[1], "result", "state") != "cleaned" ||
		!strings.Contains(nested(recs[1], "result", "summary"), "may have served a tenant") {
		t.Errorf("run %s's record: run %s, %s: %s; want cleaned, not returned", run,
			nested(recs[1], "run_id"), nested(recs[1], "result", "state"), nested(recs[1], "result", "summary"))
	}
	if nested(recs[0], "run_id") == run || nested(recs[0], "result", "state") != "returned" {
		t.Errorf("new run's record: run %s, %s; want a new run, returned", nested(recs[0], "run_id"), nested(recs[0], "result", "state"))
	}
}
