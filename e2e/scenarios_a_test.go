package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// Shelve offload drops the instance's allocations: the device is cleaned
// and returned while the claim is kept dormant; the unshelve lands on a
// device of the same host (the same one once it is back in the pool, or
// another), which is claimed and stays reserved while allocated; the final
// delete cleans it and returns it.
func TestShelveOffloadUnshelve(t *testing.T) {
	cases := []struct {
		name     string
		f        harness.Format
		unshelve string // device the unshelved instance gets
	}{
		{"versioned/same-device", harness.Versioned, "0000:81:00.0"},
		{"legacy/other-device", harness.Legacy, "0000:82:00.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const first = "0000:81:00.0"
			c := NewCloud(t)
			h := aAddHost(t, c, []SimDevice{{Address: "0000:81:00.0"}, {Address: "0000:82:00.0"}})
			inst := harness.NewUUID()
			c.Boot(t, h, inst, tc.f, first)
			aWaitLog(t, h, 30*time.Second, "claim recorded", "instance="+inst)

			// shelve_offload: Nova drops the allocations; the payload's
			// host is null, the publisher names the compute.
			c.P.DeleteAllocations(t, inst)
			c.Bus.PublishNotification(t, harness.Event{Type: "instance.shelve_offload.end", InstanceUUID: inst,
				NullHost: true, PublisherID: "nova-compute:" + h.Name}, tc.f)
			c.WaitAvailable(t, h, first, 60*time.Second)
			if !h.MediaZeroed(t, first) {
				t.Fatal("shelve offload: device returned to the pool but its media was not wiped")
			}
			aReturnedOnce(t, h, first)
			if aCountLog(h, "claim dormant until unshelve", "instance="+inst) == 0 {
				t.Fatalf("shelve offload did not keep the claim dormant; log tail:\n%s", tail(h.Logs(), 30))
			}

			// unshelve onto a device of the same host.
			dev := h.Device(tc.unshelve)
			c.P.AllocateInstance(t, inst, "tenant-a", "user-a", h.Node, dev)
			c.P.Burn(t, dev)
			aWriteTenantData(t, h, tc.unshelve)
			unshelveID := harness.NewUUID()
			c.Bus.PublishNotification(t, harness.Event{Type: "instance.unshelve.end", InstanceUUID: inst,
				Host: h.Name, Node: h.Name, MessageID: unshelveID}, tc.f)
			aWaitLog(t, h, 30*time.Second, "claim recorded", "message_id="+unshelveID)
			// Claimed: burned-in-use; the reconciler (2 s) gets several
			// chances to clean it while allocated and must not.
			Never(t, 5*time.Second, "unshelved device touched while allocated", func() (bool, string) {
				if r := c.Reserved(t, dev); r != 1 {
					return true, fmt.Sprintf("reserved=%d, want 1 (burned-in-use)", r)
				}
				if h.MediaZeroed(t, tc.unshelve) {
					return true, "media wiped while the instance holds the device"
				}
				return false, ""
			})
			wantBefore := 0
			if tc.unshelve == first {
				wantBefore = 1
			}
			if st := aRecordStates(t, h, tc.unshelve); len(st) != wantBefore {
				t.Fatalf("unshelved device has %d records before the delete, want %d: %v", len(st), wantBefore, st)
			}

			c.Delete(t, h, inst, tc.f)
			c.WaitAvailable(t, h, tc.unshelve, 60*time.Second)
			if !h.MediaZeroed(t, tc.unshelve) {
				t.Error("delete after unshelve: device returned but its media was not wiped")
			}
			if st := aRecordStates(t, h, tc.unshelve); len(st) != wantBefore+1 || aCount(st, "returned") != wantBefore+1 {
				t.Errorf("delete after unshelve: want %d returned records, got %v", wantBefore+1, st)
			}
			if tc.unshelve != first {
				if st := aRecordStates(t, h, first); len(st) != 1 {
					t.Errorf("the shelved-from device was cleaned again: records %v", st)
				}
				if aCountLog(h, "claim recorded", "instance="+inst) < 2 {
					t.Errorf("unshelve onto another device recorded no new claim; log tail:\n%s", tail(h.Logs(), 30))
				}
			}
			for _, a := range []string{"0000:81:00.0", "0000:82:00.0"} {
				if r := c.Reserved(t, h.Device(a)); r != 0 {
					t.Errorf("device %s ends reserved=%d", a, r)
				}
			}
		})
	}
}

// Nova deletes the instance but the notification is lost: the periodic
// reconciler alone finds the dirty device, cleans it and returns it.
func TestLostNotificationReconcilerCleans(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := aAddHost(t, c, []SimDevice{{Address: addr}}, WithReconcileInterval(2*time.Second))
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	aWaitLog(t, h, 30*time.Second, "claim recorded", "instance="+inst)
	c.P.DeleteAllocations(t, inst) // and no instance.delete.end, ever
	c.WaitAvailable(t, h, addr, 60*time.Second)
	if !h.MediaZeroed(t, addr) {
		t.Error("device returned to the pool but its media was not wiped")
	}
	aReturnedOnce(t, h, addr)
	m := aMetrics(t, h)
	if n, _ := aMetric(m, "scour_notifications_received_total", `event_type="instance.delete.end"`); n != 0 {
		t.Errorf("a delete.end was received (%v) though none was published", n)
	}
	aWantMetric(t, m, "scour_lifecycle_unreserves_total", 1, `result="ok"`)
}

// Duplicated and reordered notifications: delete.end twice (one a
// redelivery with the same ids) and a create.end arriving after the
// delete. The device is cleaned once and returned once; the late
// create.end claims and burns nothing. Only notifications drive this
// (reconcile interval one hour).
func TestDuplicateAndReorderedNotifications(t *testing.T) {
	cases := []struct {
		name         string
		f            harness.Format
		createBefore bool // a create.end was delivered before the delete too
	}{
		{"versioned/duplicate-delete-then-late-create", harness.Versioned, true},
		{"legacy/delete-before-create", harness.Legacy, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const addr = "0000:81:00.0"
			c := NewCloud(t)
			h := aAddHost(t, c, []SimDevice{{Address: addr}, {Address: "0000:82:00.0"}}, WithReconcileInterval(time.Hour))
			inst := harness.NewUUID()
			if tc.createBefore {
				c.Boot(t, h, inst, tc.f, addr)
				aWaitLog(t, h, 30*time.Second, "claim recorded", "instance="+inst)
			} else {
				c.P.AllocateInstance(t, inst, "tenant-a", "user-a", h.Node, h.Device(addr))
				c.P.Burn(t, h.Device(addr))
			}
			c.P.DeleteAllocations(t, inst)
			del := harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: h.Name, Node: h.Name,
				MessageID: harness.NewUUID(), UniqueID: strings.ReplaceAll(harness.NewUUID(), "-", "")}
			c.Bus.PublishNotification(t, del, tc.f) // Nova's
			c.Bus.PublishNotification(t, del, tc.f) // a redelivery: same ids
			c.Bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", InstanceUUID: inst,
				Host: h.Name, Node: h.Name}, tc.f) // a second emission
			c.WaitAvailable(t, h, addr, 60*time.Second)

			lateID := harness.NewUUID()
			c.Bus.PublishNotification(t, harness.Event{Type: "instance.create.end", InstanceUUID: inst, Host: h.Name, Node: h.Name,
				ProjectID: "tenant-a", UserID: "user-a", MessageID: lateID}, tc.f)
			aWaitLog(t, h, 30*time.Second, "nothing to claim", "message_id="+lateID)

			Never(t, 4*time.Second, "after the late create.end", func() (bool, string) {
				if r := c.Reserved(t, h.Device(addr)); r != 0 {
					return true, fmt.Sprintf("device reserved=%d again (burned for a gone instance?)", r)
				}
				if st := aRecordStates(t, h, addr); len(st) != 1 || st[0] != "returned" {
					return true, fmt.Sprintf("want exactly one returned record, got %v", st)
				}
				return false, ""
			})
			if !h.MediaZeroed(t, addr) {
				t.Error("device returned but its media was not wiped")
			}
			if c.Reserved(t, h.Device("0000:82:00.0")) != 0 || h.Records(t, "0000:82:00.0") != nil {
				t.Error("the neighbour device was touched")
			}
			if n := aCountLog(h, "claim recorded", "message_id="+lateID); n != 0 {
				t.Error("the late create.end recorded a claim for a gone instance")
			}

			// The Prometheus endpoint shows the lifecycle.
			m := aMetrics(t, h)
			delType, createType := "instance.delete.end", "instance.create.end"
			if tc.f == harness.Legacy {
				delType, createType = "compute."+delType, "compute."+createType
			}
			if n, found := aMetric(m, "scour_notifications_received_total", `event_type="`+delType+`"`); !found || n < 2 {
				t.Errorf("/metrics: scour_notifications_received_total{event_type=%q} = %v (exposed %v), want >= 2", delType, n, found)
			}
			if n, found := aMetric(m, "scour_notifications_received_total", `event_type="`+createType+`"`); !found || n < 1 {
				t.Errorf("/metrics: scour_notifications_received_total{event_type=%q} = %v (exposed %v), want >= 1", createType, n, found)
			}
			aWantMetric(t, m, "scour_lifecycle_cleans_started_total", 1)
			aWantMetric(t, m, "scour_lifecycle_cleans_finished_total", 1, `verdict="clean"`)
			aWantMetric(t, m, "scour_lifecycle_unreserves_total", 1, `result="ok"`)
			// Nova burned the device: the claim path must not say it did
			// (the reconciler may still burn it legitimately if a scan
			// falls between Nova's allocation and its burn).
			if n := aCountLog(h, "burned device Nova left unburned"); n != 0 {
				t.Errorf("the claim handler reports %d burn(s) of a device Nova had burned", n)
			}
		})
	}
}

// A forged (or early) delete for an instance that still runs on the
// device, in both formats and as nova-api's host-less broadcast: nothing
// is wiped, the device stays burned-in-use, no record is made.
func TestForgedDeleteForRunningInstance(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := aAddHost(t, c, []SimDevice{{Address: addr}}) // reconciler every 2 s: it gets chances too
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	aWaitLog(t, h, 30*time.Second, "claim recorded", "instance="+inst)

	forged := []struct {
		f  harness.Format
		ev harness.Event
	}{
		{harness.Versioned, harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: h.Name, Node: h.Name}},
		{harness.Legacy, harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: h.Name, Node: h.Name}},
		{harness.Versioned, harness.Event{Type: "instance.delete.end", Sample: "instance-delete-end_not_scheduled",
			InstanceUUID: inst, NullHost: true}},
	}
	for _, fg := range forged {
		fg.ev.MessageID = harness.NewUUID()
		c.Bus.PublishNotification(t, fg.ev, fg.f)
		aWaitLog(t, h, 30*time.Second, "instance still holds one-time-use devices", "message_id="+fg.ev.MessageID)
	}
	d := h.Device(addr)
	Never(t, 6*time.Second, "after forged deletes", func() (bool, string) {
		if h.MediaZeroed(t, addr) {
			return true, "the running instance's device was wiped"
		}
		if r := c.Reserved(t, d); r != 1 {
			return true, fmt.Sprintf("reserved=%d, want 1 (burned-in-use)", r)
		}
		if recs := h.Records(t, addr); len(recs) != 0 {
			return true, fmt.Sprintf("cleaning records made: %v", recs)
		}
		if c.Quarantined(t, d) {
			return true, "device quarantined"
		}
		return false, ""
	})
	if a := c.P.ConsumerAllocations(t, inst); len(a) == 0 {
		t.Error("the instance lost its allocations")
	}
	if n := aCountLog(h, "claim released", "instance="+inst); n != 0 {
		t.Errorf("a forged delete released the running instance's claim (%d times)", n)
	}
	// Nova burned the device at boot: the claim handler must not say it
	// did (the reconciler's own burn logs a different line).
	if n := aCountLog(h, "burned device Nova left unburned"); n != 0 {
		t.Errorf("the claim handler reports %d burn(s) of a device Nova had burned", n)
	}
}

// Sanitize fails every time (a simulator "fail" fault: a transient error,
// so the first run ends retry-later and the second, max_runs 2, ends in
// quarantine): the device stays reserved with the quarantine trait, a
// quarantined record and an error log line, and never returns.
func TestCleaningFailureQuarantines(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := aAddHost(t, c, []SimDevice{{Address: addr}})
	d := h.Device(addr)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	h.FaultFile(t, addr, "fail", "sanitize")
	c.Delete(t, h, inst, harness.Versioned)

	Eventually(t, 60*time.Second, "device quarantined", func() (bool, string) {
		return c.Quarantined(t, d), "no quarantine trait; log tail:\n" + tail(h.Logs(), 30)
	})
	if r := c.Reserved(t, d); r != 1 {
		t.Errorf("quarantined device reserved=%d, want 1", r)
	}
	st := aRecordStates(t, h, addr)
	if aCount(st, "quarantined") != 1 || aCount(st, "returned") != 0 || len(st) != 2 {
		t.Errorf("want one failed (retry-later) run then one quarantined record, got %v", st)
	}
	if aCountLog(h, "level=ERROR", "device quarantined") == 0 {
		t.Errorf("no error log line for the quarantine; log tail:\n%s", tail(h.Logs(), 30))
	}
	m := aMetrics(t, h)
	aWantMetric(t, m, "scour_lifecycle_cleans_finished_total", 1, `verdict="quarantine"`)
	aWantMetric(t, m, "scour_lifecycle_cleans_finished_total", 0, `verdict="clean"`)
	aWantMetric(t, m, "scour_lifecycle_unreserves_total", 0, `result="ok"`)
	Eventually(t, 10*time.Second, "quarantine shown by the devices gauge", func() (bool, string) {
		n, _ := aMetric(aMetrics(t, h), "scour_lifecycle_devices", `state="quarantined"`)
		return n == 1, fmt.Sprintf(`scour_lifecycle_devices{state="quarantined"}=%v`, n)
	})

	// Several reconcile intervals (2 s): it never returns, nor runs again.
	Never(t, 7*time.Second, "quarantined device", func() (bool, string) {
		if r := c.Reserved(t, d); r != 1 {
			return true, fmt.Sprintf("returned to the pool (reserved=%d)", r)
		}
		if !c.Quarantined(t, d) {
			return true, "quarantine trait gone"
		}
		if n := len(h.Records(t, addr)); n != 2 {
			return true, fmt.Sprintf("cleaned again: %d records", n)
		}
		return false, ""
	})
}

// A worn drive (95 % used, the pipeline's wear check retires at 90 %) is
// wiped before it is retired: no step of the pipeline runs after the wear
// check, but the retirement wipe erases it with the strongest technique
// it offers (block sanitize here) and the record names it; the drive
// stays reserved and quarantined, never returned.
func TestWornDeviceWipedThenRetired(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := aAddHost(t, c, []SimDevice{{Address: addr, PercentUsed: 95}})
	d := h.Device(addr)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Legacy, addr)
	c.Delete(t, h, inst, harness.Legacy)

	Eventually(t, 60*time.Second, "worn device quarantined", func() (bool, string) {
		return c.Quarantined(t, d), "no quarantine trait; log tail:\n" + tail(h.Logs(), 30)
	})
	recs := h.Records(t, addr)
	if len(recs) != 1 {
		t.Fatalf("want one record, got %d: %v", len(recs), recs)
	}
	res, _ := recs[0]["result"].(map[string]any)
	if res["state"] != "quarantined" {
		t.Errorf("record state %v, want quarantined", res["state"])
	}
	method, _ := recs[0]["method"].(map[string]any)
	steps, _ := method["steps"].([]any)
	var names []any
	for _, s := range steps {
		names = append(names, s.(map[string]any)["name"])
	}
	if fmt.Sprint(names) != "[wear retire-wipe retire-readback]" {
		t.Errorf("steps %v; want the wear check, then only the retirement wipe and its read-back", names)
	}
	rt, _ := recs[0]["retirement"].(map[string]any)
	if rt["wiped"] != true || rt["step"] != "wear" || rt["technique"] != "NVMe Sanitize, Block Erase" || rt["read_back"] != "passed" {
		t.Errorf("record retirement %v; want wiped by NVMe Sanitize, Block Erase after the wear step said retire, read back", rt)
	}
	if !h.MediaZeroed(t, addr) {
		t.Error("the retired drive still holds the tenant's data")
	}
	Never(t, 5*time.Second, "worn device", func() (bool, string) {
		if r := c.Reserved(t, d); r != 1 {
			return true, fmt.Sprintf("reserved=%d, want 1", r)
		}
		if !c.Quarantined(t, d) {
			return true, "quarantine trait gone"
		}
		if n := len(h.Records(t, addr)); n != 1 {
			return true, fmt.Sprintf("%d records, want 1", n)
		}
		return false, ""
	})
}

// Eight instances on eight devices of one host, all deleted at once: every
// device is cleaned and returned, each with exactly one record.
func TestBurstOfDeletesOnOneHost(t *testing.T) {
	t.Parallel()
	const n = 8
	var devs []SimDevice
	for i := range n {
		devs = append(devs, SimDevice{Address: fmt.Sprintf("0000:%02x:00.0", 0x81+i)})
	}
	c := NewCloud(t)
	h := aAddHost(t, c, devs, WithReconcileInterval(time.Hour))
	insts := make([]string, n)
	for i := range n {
		insts[i] = harness.NewUUID()
		c.Boot(t, h, insts[i], harness.Versioned, devs[i].Address)
	}
	for _, inst := range insts {
		aWaitLog(t, h, 60*time.Second, "claim recorded", "instance="+inst)
	}
	for _, inst := range insts {
		c.P.DeleteAllocations(t, inst)
	}
	for _, inst := range insts {
		c.Bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: h.Name, Node: h.Name}, harness.Versioned)
	}
	for _, d := range devs {
		c.WaitAvailable(t, h, d.Address, 120*time.Second)
	}
	for _, d := range devs {
		if !h.MediaZeroed(t, d.Address) {
			t.Errorf("%s returned but not wiped", d.Address)
		}
		aReturnedOnce(t, h, d.Address)
	}
	m := aMetrics(t, h)
	aWantMetric(t, m, "scour_notifications_received_total", n, `event_type="instance.delete.end"`)
	aWantMetric(t, m, "scour_lifecycle_cleans_finished_total", n, `verdict="clean"`)
	aWantMetric(t, m, "scour_lifecycle_unreserves_total", n, `result="ok"`)
}
