package handlers_test

import (
	"context"
	"errors"
	"github.com/scour-project/scour/placement"
	"strings"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/handlers/handlerstest"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/internal/testkit"
)

// arqEnv is a host of two 4-unit Cyborg FPGAs, rp-1 (0000:81:00.0) and
// rp-2 (0000:82:00.0), whose handlers read Cyborg's ARQs; logs holds
// their log.
func arqEnv(t *testing.T) (*env, *testkit.SyncBuffer) {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	e := newEnv(t, 2, nil)
	e.logs = logs
	e.acc = &handlerstest.Accelerators{}
	e.build(nil)
	for _, i := range []int{1, 2} {
		e.w.Set(rp(i), func(d *handlers.Device) { d.Cyborg, d.ResourceClass, d.Total = true, "FPGA", 4 })
	}
	e.cl.OnClean = e.c.Cleaned
	return e, logs
}

// boundARQ is a Bound ARQ on compute1 for device rp whose attach handle
// is addr, as Cyborg lists it.
func boundARQ(uuid, rp string, addr hardware.Address) handlers.ARQ {
	return handlers.ARQ{UUID: uuid, State: handlers.ARQBound, Hostname: "compute1", DeviceRPUUID: rp,
		AttachHandleType: "PCI", Address: addr}
}

// The bind records which card and attach handle the tenant got; the
// record outlives the ARQ, which Nova deletes at release, and the card
// is cleaned and returned as before.
func TestCyborgBindRecordsTheARQ(t *testing.T) {
	t.Parallel()
	e, _ := arqEnv(t)
	e.w.Allocate(cyborgTenant, false, rp(1))
	e.acc.Bind(cyborgTenant, boundARQ("arq-1", rp(1), "0000:81:00.0"))
	e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
	want := handlers.ARQRecord{Instance: cyborgTenant, DeviceRP: rp(1), ARQ: "arq-1", ARQDeviceRP: rp(1),
		ARQHostname: "compute1", AttachHandleType: "PCI", Address: "0000:81:00.0", Agree: true}
	if got := e.c.ARQRecords(); len(got) != 1 || got[0] != want {
		t.Fatalf("ARQ records after the bind = %+v, want [%+v]", got, want)
	}
	e.acc.Delete(cyborgTenant)
	e.w.Free(cyborgTenant)
	e.handle(cmd(command.KindRelease, "instance.delete.end", cyborgTenant))
	e.reconcile()
	e.wantDevice(1, placement.StateAvailable, 1, 1)
	if got := e.c.ARQRecords(); len(got) != 1 || got[0] != want {
		t.Fatalf("ARQ records after the release = %+v, want the bind's", got)
	}
	if got := metricValue(t, e, "scour_lifecycle_cyborg_arqs_total", "result", "agree"); got != 1 {
		t.Errorf("scour_lifecycle_cyborg_arqs_total{result=agree} = %v, want 1", got)
	}
}

// An ARQ that disagrees with this host's Placement tree or hardware
// touches nothing: the device it names is neither fenced nor cleaned nor
// returned on its word, no agreeing record is written, and it is
// reported (a WARN naming the ARQ, the instance and the handle; the
// mismatch counter). The card Placement shows the tenant holding is
// fenced from Placement alone, as without Cyborg's API.
func TestCyborgARQThatDisagreesTouchesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		arq    handlers.ARQ
		absent hardware.Address // local discovery does not find it
		why    string
	}{
		{name: "handle of a device this host does not have", arq: boundARQ("arq-x", rp(1), "0000:81:00.0"),
			absent: "0000:81:00.0", why: "local discovery finds no PCI function 0000:81:00.0"},
		{name: "handle and rp of another host's device",
			arq: handlers.ARQ{UUID: "arq-x", State: handlers.ARQBound, Hostname: "compute9", DeviceRPUUID: "rp-of-compute9",
				AttachHandleType: "PCI", Address: "0000:3b:00.0"},
			why: "device_rp_uuid rp-of-compute9 is no Cyborg device of host compute1"},
		{name: "another host's name on this host's card", arq: handlers.ARQ{UUID: "arq-x", State: handlers.ARQBound,
			Hostname: "compute9", DeviceRPUUID: rp(1), AttachHandleType: "PCI", Address: "0000:81:00.0"},
			why: `bound on host "compute9"`},
		{name: "handle of the other card of this host", arq: boundARQ("arq-x", rp(1), "0000:82:00.0"),
			why: "the attach handle 0000:82:00.0 is not device"},
		{name: "rp of the other card, which the tenant does not hold", arq: boundARQ("arq-x", rp(2), "0000:82:00.0"),
			why: "device_rp_uuid rp-2 is no Cyborg device"},
		{name: "MDEV handle", arq: handlers.ARQ{UUID: "arq-x", State: handlers.ARQBound, Hostname: "compute1",
			DeviceRPUUID: rp(1), AttachHandleType: "MDEV", AddressErr: `attach handle type "MDEV" names no PCI function`},
			why: "names no PCI function"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, logs := arqEnv(t)
			e.hw.PresentF = func(_ context.Context, a hardware.Address) (bool, error) { return a != tc.absent, nil }
			e.w.Allocate(cyborgTenant, false, rp(1))
			e.acc.Bind(cyborgTenant, tc.arq)
			e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
			e.reconcile()
			recs := e.c.ARQRecords()
			if len(recs) != 1 || recs[0].Agree || !strings.Contains(recs[0].Detail, tc.why) {
				t.Fatalf("ARQ records = %+v, want one mismatch saying %q", recs, tc.why)
			}
			if got := metricValue(t, e, "scour_lifecycle_cyborg_arqs_total", "result", "mismatch"); got != 1 {
				t.Errorf("scour_lifecycle_cyborg_arqs_total{result=mismatch} = %v, want 1 (reported once, not at every scan)", got)
			}
			line := logs.String()
			for _, s := range []string{"level=WARN", "Cyborg ARQ disagrees", "arq=arq-x", "instance=" + cyborgTenant, "attach_handle="} {
				if !strings.Contains(line, s) {
					t.Errorf("log lacks %q:\n%s", s, line)
				}
			}
			other := e.w.Device(rp(2))
			if other.Reserved != 0 || e.w.Count("burn", rp(2))+e.w.Count("refence", rp(2))+e.w.Count("unreserve", rp(2)) != 0 || e.cl.CallsFor(rp(2)) != 0 {
				t.Errorf("the other card was touched: reserved %d, writes burn %d refence %d unreserve %d, cleans %d",
					other.Reserved, e.w.Count("burn", rp(2)), e.w.Count("refence", rp(2)), e.w.Count("unreserve", rp(2)), e.cl.CallsFor(rp(2)))
			}
			if d := e.w.Device(rp(1)); d.Reserved != 4 {
				t.Errorf("the card Placement shows held: reserved %d, want 4 (fenced from Placement alone)", d.Reserved)
			}
		})
	}
}

// Cyborg unreachable at bind: the card is fenced from Placement's
// allocations alone, the claim is recorded, and the ARQ record is
// written by a later scan once Cyborg answers (while the tenant still
// holds the card and its ARQ exists).
func TestCyborgUnreachableAtBindFencesAndRecordsLater(t *testing.T) {
	t.Parallel()
	e, _ := arqEnv(t)
	e.acc.SetFail(errors.New("dial tcp 10.0.0.5:6666: connect: connection refused"))
	e.w.Allocate(cyborgTenant, false, rp(1))
	e.acc.Bind(cyborgTenant, boundARQ("arq-1", rp(1), "0000:81:00.0"))
	e.handle(cmd(command.KindClaim, "instance.create.end", cyborgTenant))
	if d := e.w.Device(rp(1)); d.Reserved != 4 {
		t.Fatalf("Cyborg down at bind: reserved %d, want 4 (the fence does not wait for Cyborg)", d.Reserved)
	}
	if _, ok := e.c.ForDevice(cyborgTenant, rp(1)); !ok {
		t.Fatal("Cyborg down at bind: no claim recorded")
	}
	if n := len(e.c.ARQRecords()); n != 0 {
		t.Fatalf("records with Cyborg down: %d", n)
	}
	ctx := context.Background()
	if err := e.r.Scan(ctx, "test"); err == nil || !strings.Contains(err.Error(), "read its Cyborg accelerator requests") {
		t.Fatalf("scan with Cyborg down: error %v, want the ARQ read named", err)
	}
	e.acc.SetFail(nil)
	e.reconcile()
	if got := e.c.ARQRecords(); len(got) != 1 || !got[0].Agree || got[0].Address != "0000:81:00.0" {
		t.Fatalf("ARQ records once Cyborg answers = %+v, want the agreeing one", got)
	}
	reads := e.acc.Reads()
	e.reconcile()
	if e.acc.Reads() != reads {
		t.Errorf("a recorded instance is read from Cyborg again at every scan")
	}
	if got := metricValue(t, e, "scour_lifecycle_cyborg_arqs_total", "result", "error"); got < 2 {
		t.Errorf("scour_lifecycle_cyborg_arqs_total{result=error} = %v, want the failed reads counted", got)
	}
}
