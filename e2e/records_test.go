package e2e

import (
	"fmt"
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
