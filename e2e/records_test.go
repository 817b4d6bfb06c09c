package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// Regression (issue 16, repro 1), as an operator did it: Placement frozen
// from the last step on, so the un-reserve after the clean verdict hangs;
// scourd killed -9 there; Placement thawed; scourd restarted. Before, the
// verdict had already stored a "returned" record for a return that never
// happened, and the re-clean added a second one. Now the run waits as
// "cleaned", the restart resumes it without cleaning again, and the one
// record of the release says returned only after the un-reserve.
func TestKillBetweenVerdictAndUnreserveKeepsOneRecord(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	// Sanitize takes ten steps of 300ms; after it, nothing asks Placement
	// before the un-reserve (the reset step, destructive, would: dropped).
	noReset := func(cfg map[string]any) {
		p := cfg["pipelines"].(map[string]any)["profiles"].([]map[string]any)[0]["pipeline"].(map[string]any)
		steps := p["steps"].([]map[string]any)
		p["steps"] = steps[:len(steps)-1]
	}
	h := c.AddHost(t, []SimDevice{{Address: addrA}}, WithReconcileInterval(time.Hour), WithSlowWipes(300*time.Millisecond), noReset)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addrA)
	waitClaim(t, h, inst)
	c.Delete(t, h, inst, harness.Versioned)

	run := logAttr(waitLog(t, h, 60*time.Second, `msg="step started"`, "step=sanitize"), "run")
	// SIGSTOP Placement: the un-reserve after the verdict hangs. A held
	// request is answered 503 after 15s, never forwarded: a request of the
	// killed process that the proxy still holds cannot un-reserve the
	// device behind the test's back, nor keep the proxy's Close waiting.
	c.P.Inject(harness.Fault{Delay: 15 * time.Second, Status: 503})
	t.Cleanup(c.P.Heal)
	finished := waitLog(t, h, 30*time.Second, `msg="cleaning run finished"`, "verdict=clean")
	if logAttr(finished, "run") != run {
		t.Fatalf("finished %q, want run %s", finished, run)
	}
	time.Sleep(time.Second) // the un-reserve is in flight, held by the proxy
	h.Kill(t)
	killedAt := len(h.Logs())
	c.P.Heal()
	if r := c.Reserved(t, h.Device(addrA)); r != 1 {
		t.Fatalf("reserved=%d after the kill: the un-reserve must not have happened", r)
	}
	if st := aRecordStates(t, h, addrA); len(st) != 0 {
		t.Fatalf("records before the restart: %v; want none closed (the run waits, cleaned, for its un-reserve)", st)
	}

	h.Start(t)
	c.WaitAvailable(t, h, addrA, 60*time.Second)
	after := h.Logs()[killedAt:]
	if n := countLines(after, `msg="step started"`); n != 0 {
		t.Errorf("the restart ran %d steps again; the cleaned run needed only its un-reserve", n)
	}
	recs := h.Records(t, addrA)
	if len(recs) != 1 || nested(recs[0], "run_id") != run || nested(recs[0], "result", "state") != "returned" {
		t.Fatalf("records of the release: %v; want exactly one, run %s, returned", recs, run)
	}
}

// Safety rules 1 and 5 across a kill right after the un-reserve landed:
// the PUT takes effect, its answer is lost, and scourd is killed before it
// records the return. While scourd is down another tenant gets the device
// (no notification reaches scour), Nova burns it, and the tenant leaves.
// Restarted, scourd finds the device reserved and free, as if never
// returned. The old run must not return it on its old clean: its PUT
// journal shows Placement moved on beyond that PUT, so its record closes
// as not returned and a new run cleans the device before it returns.
func TestKillAfterUnreserveLandedThenAnotherTenantCleansAgain(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addrA}}, WithReconcileInterval(time.Hour))
	dev := h.Device(addrA)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addrA)
	waitClaim(t, h, inst)
	// From here scourd's first PUT is the un-reserve (Nova burned the
	// device itself): it lands, and its answer is held for a minute.
	c.P.Inject(harness.Fault{Method: http.MethodPut, LoseAnswer: true, Delay: time.Minute, Status: http.StatusServiceUnavailable, Times: 1})
	t.Cleanup(c.P.Heal)
	c.Delete(t, h, inst, harness.Versioned)
	run := logAttr(waitLog(t, h, 60*time.Second, `msg="cleaning run finished"`, "verdict=clean"), "run")
	Eventually(t, 30*time.Second, "the un-reserve lands", func() (bool, string) {
		r := c.Reserved(t, dev)
		return r == 0, fmt.Sprintf("reserved %d", r)
	})
	h.Kill(t) // the answer is still held: the return is not recorded
	killedAt := len(h.Logs())
	c.P.Heal()
	if st := aRecordStates(t, h, addrA); len(st) != 0 {
		t.Fatalf("records before the restart: %v; want none closed (the run waits, cleaned, for its return)", st)
	}

	other := harness.NewUUID()
	c.P.AllocateInstance(t, other, "tenant-b", "user-b", h.Node, dev)
	c.P.Burn(t, dev)
	c.P.DeleteAllocations(t, other)

	h.Start(t)
	c.WaitAvailable(t, h, addrA, 60*time.Second)
	after := h.Logs()[killedAt:]
	if n := countLines(after, `msg="step started"`); n == 0 {
		t.Fatal("the device another tenant used went back to the pool without a new clean")
	}
	recs := h.Records(t, addrA) // newest first
	if len(recs) != 2 {
		t.Fatalf("records: %d, want 2 (the old run, not returned; the new one, returned)", len(recs))
	}
	if nested(recs[1], "run_id") != run || nested(recs[1], "result", "state") != "cleaned" ||
		!strings.Contains(nested(recs[1], "result", "summary"), "may have served a tenant") {
		t.Errorf("old run's record: run %s, %s: %s; want run %s, cleaned, not returned",
			nested(recs[1], "run_id"), nested(recs[1], "result", "state"), nested(recs[1], "result", "summary"), run)
	}
	if nested(recs[0], "run_id") == run || nested(recs[0], "result", "state") != "returned" {
		t.Errorf("new run's record: run %s, %s; want a new run, returned", nested(recs[0], "run_id"), nested(recs[0], "result", "state"))
	}
	// The old run erased inst's data; whoever used the device since was
	// never seen: the new record must not name inst.
	if got := nested(recs[0], "previous_tenant", "instance_uuid"); got != "unknown" {
		t.Errorf("new run's record names previous tenant %q, want unknown (%s's data was erased by run %s)", got, inst, run)
	}
}

// Regression (issue 16, repro 2): a device allocated with no notification
// (scourd's scan burns it for the new consumer) and then freed was cleaned
// in the name of the instance of the claim before, long gone. The record
// now names the consumer the scan saw holding the device.
func TestRecordNamesTheConsumerSeenWithoutNotification(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addrA}}, WithReconcileInterval(time.Second))
	dev := h.Device(addrA)
	first := harness.NewUUID()
	c.Boot(t, h, first, harness.Versioned, addrA)
	waitClaim(t, h, first)
	c.Delete(t, h, first, harness.Versioned)
	c.WaitAvailable(t, h, addrA, 60*time.Second)

	silent := harness.NewUUID()
	c.P.AllocateInstance(t, silent, "tenant-b", "user-b", h.Node, dev) // no burn, no notification
	Eventually(t, 30*time.Second, "the scan burns the device", func() (bool, string) {
		r := c.Reserved(t, dev)
		return r == 1, fmt.Sprintf("reserved %d", r)
	})
	c.P.DeleteAllocations(t, silent)
	Eventually(t, 60*time.Second, "a second cleaning record", func() (bool, string) {
		n := len(aRecordStates(t, h, addrA))
		return n == 2, fmt.Sprintf("%d records", n)
	})
	recs := h.Records(t, addrA) // newest first
	if got := nested(recs[0], "previous_tenant", "instance_uuid"); got != silent {
		t.Fatalf("record of the second cleaning names %s, want %s (the consumer the scan saw); the first named %s",
			got, silent, nested(recs[1], "previous_tenant", "instance_uuid"))
	}
	if got := nested(recs[1], "previous_tenant", "instance_uuid"); got != first {
		t.Errorf("record of the first cleaning names %s, want %s", got, first)
	}
}
