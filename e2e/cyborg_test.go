package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/cyborg/cyborgtest"
	"github.com/scour-project/scour/e2e/harness"
)

// cyborgCard is one Cyborg deployable of a test host: simulated as a GPU
// function (the gpu profile scrubs it; FPGAs and their golden images are
// proven in fpga_glance_test.go).
type cyborgCard struct {
	Address string
	RC      string
	Units   int
}

// addCyborgHost seeds a compute node whose only devices are Cyborg's
// deployables (no one-time-use device), and starts a scourd with
// placement.cyborg on, reading ARQs from cy.
func (c *Cloud) addCyborgHost(t *testing.T, cy *cyborgtest.Server, cards []cyborgCard, opts ...HostOption) *Host {
	t.Helper()
	name := harness.UniqueName("cyb")
	h := &Host{Name: name, Node: c.P.SeedComputeNode(t, name), Dir: t.TempDir(), cloud: c}
	for _, cd := range cards {
		c.P.SeedCyborgDevice(t, h.Node, cd.Address, cd.RC, cd.Units, harness.TraitOwnerCyborg)
		h.Devices = append(h.Devices, SimDevice{Address: cd.Address, Kind: "gpu"})
	}
	h.http = freeAddr(t)
	cfg := h.baseConfig()
	cfg["placement"].(map[string]any)["cyborg"] = map[string]any{"enabled": true, "traits": []string{harness.TraitOwnerCyborg},
		"resource_classes": []string{"FPGA", "PGPU"}, "endpoint": cy.Endpoint()}
	for _, o := range opts {
		o(cfg)
	}
	return c.start(t, h, cfg)
}

// bindAccelerator plays Nova binding inst to one unit of card on h: the
// scheduler's allocation (Nova burns nothing for Cyborg), Cyborg's Bound
// ARQ with the card's PCI attach handle (handle overrides it when set),
// then, unless quiet, instance.create.end.
func (c *Cloud) bindAccelerator(t *testing.T, cy *cyborgtest.Server, h *Host, inst, card, handle string, quiet bool) {
	t.Helper()
	d := h.Device(card)
	c.P.AllocateInstance(t, inst, "tenant-a", "user-a", h.Node, d)
	if handle == "" {
		handle = card
	}
	cy.Bind(cyborgtest.ARQ{UUID: "arq-" + inst, State: "Bound", DeviceProfile: "fpga-dp", Hostname: h.Name,
		DeviceRPUUID: d.UUID, Instance: inst, AttachType: "PCI", AttachUUID: harness.NewUUID(), Attach: cyborgtest.PCI(handle)})
	if !quiet {
		c.Bus.PublishNotification(t, harness.Event{Type: "instance.create.end", InstanceUUID: inst, Host: h.Name, Node: h.Name,
			ProjectID: "tenant-a", UserID: "user-a"}, harness.Versioned)
	}
}

// releaseAccelerator plays Nova releasing inst's accelerators with event
// (instance.delete.end, instance.shelve_offload.end): allocations gone,
// ARQs deleted, the notification.
func (c *Cloud) releaseAccelerator(t *testing.T, cy *cyborgtest.Server, h *Host, inst, event string) {
	t.Helper()
	c.P.DeleteAllocations(t, inst)
	cy.DeleteInstance(inst)
	c.Bus.PublishNotification(t, harness.Event{Type: event, InstanceUUID: inst, Host: h.Name, Node: h.Name}, harness.Versioned)
}

// waitReserved waits until d's reserved is want.
func (c *Cloud) waitReserved(t *testing.T, h *Host, d *harness.DeviceRP, want int, what string) {
	t.Helper()
	Eventually(t, 60*time.Second, what, func() (bool, string) {
		r := c.Reserved(t, d)
		return r == want, fmt.Sprintf("reserved %d, want %d; scourd log tail:\n%s", r, want, tail(h.Logs(), 20))
	})
}

// tryAllocate asks Placement for one unit of d for a new consumer, as the
// scheduler would; it returns the HTTP status (204: got it, 409: none free).
func tryAllocate(t *testing.T, c *Cloud, h *Host, d *harness.DeviceRP) int {
	t.Helper()
	body := map[string]any{"allocations": map[string]any{d.UUID: map[string]any{"resources": map[string]int{d.ResourceClass: 1}}},
		"consumer_generation": nil, "project_id": "tenant-z", "user_id": "user-z", "consumer_type": "INSTANCE"}
	inst := harness.NewUUID()
	status, raw, err := placementDo(c.P, http.MethodPut, "/allocations/"+inst, "1.39", body)
	if err != nil {
		t.Fatal(err)
	}
	if status == http.StatusNoContent {
		c.P.DeleteAllocations(t, inst)
	} else if status != http.StatusConflict {
		t.Fatalf("allocating a unit of %s: %d %s", d.Name, status, raw)
	}
	return status
}

// Through scourd, RabbitMQ, the real Placement and the Cyborg stand-in:
// a 4-unit FPGA bound by two tenants at once is fenced whole at the
// bind and its ARQs recorded; pause and reboot do nothing; a freed unit
// is not allocatable while the other tenant holds the card (this fails
// without the fence); the last release cleans the card and returns all
// 4 units; a shelve offload cleans and returns a 1-unit GPU.
func TestE2ECyborgAcceleratorLifecycle(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	cy := harness.StartCyborg(t)
	const fpga, gpu = "0000:3b:00.0", "0000:af:00.0"
	h := c.addCyborgHost(t, cy, []cyborgCard{{fpga, "FPGA", 4}, {gpu, "PGPU", 1}})
	card, g := h.Device(fpga), h.Device(gpu)

	a, b := harness.NewUUID(), harness.NewUUID()
	c.bindAccelerator(t, cy, h, a, fpga, "", true) // both bound before scour's claim runs
	c.bindAccelerator(t, cy, h, b, fpga, "", false)
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.create.end", InstanceUUID: a, Host: h.Name, Node: h.Name,
		ProjectID: "tenant-a", UserID: "user-a"}, harness.Versioned)
	c.waitReserved(t, h, card, 4, "the FPGA fenced whole at the bind")
	for _, inst := range []string{a, b} {
		waitLog(t, h, 30*time.Second, `msg="Cyborg ARQ recorded"`, "instance="+inst, "attach_handle="+fpga)
	}
	if st := tryAllocate(t, c, h, card); st != http.StatusConflict {
		t.Fatalf("a third tenant got a unit of the fenced FPGA (status %d)", st)
	}

	for _, ev := range []string{"instance.pause.end", "instance.reboot.end"} {
		c.Bus.PublishNotification(t, harness.Event{Type: ev, InstanceUUID: a, Host: h.Name, Node: h.Name}, harness.Versioned)
	}
	gi := harness.NewUUID()
	c.bindAccelerator(t, cy, h, gi, gpu, "", false) // published after pause and reboot: handled after them
	c.waitReserved(t, h, g, 1, "the GPU fenced at the bind")
	if n := countLines(h.Logs(), `msg="step started"`); n != 0 || c.Reserved(t, card) != 4 {
		t.Fatalf("after pause and reboot: %d steps ran, FPGA reserved %d; want nothing done", n, c.Reserved(t, card))
	}

	// a leaves; b still holds a unit of the card a's data is on.
	c.releaseAccelerator(t, cy, h, a, "instance.delete.end")
	waitLog(t, h, 30*time.Second, `msg="claim released"`, "instance="+a)
	if st := tryAllocate(t, c, h, card); st != http.StatusConflict {
		t.Fatalf("a unit freed by %s was handed to a new tenant while %s holds the dirty card (status %d)", a, b, st)
	}
	if n := countLines(h.Logs(), `msg="step started"`); n != 0 {
		t.Fatalf("the card was cleaned under tenant %s (%d steps)", b, n)
	}

	c.releaseAccelerator(t, cy, h, b, "instance.delete.end")
	c.WaitAvailable(t, h, fpga, 60*time.Second)
	inv := c.P.Inventory(t, card.UUID, "FPGA")
	if inv.Reserved != 0 || inv.Total != 4 || inv.MaxUnit != 4 {
		t.Fatalf("FPGA after the return: %+v; want all 4 units back, max_unit kept", inv)
	}
	aReturnedOnce(t, h, fpga)
	if st := tryAllocate(t, c, h, card); st != http.StatusNoContent {
		t.Fatalf("a unit of the returned FPGA: status %d, want 204", st)
	}

	c.releaseAccelerator(t, cy, h, gi, "instance.shelve_offload.end")
	c.WaitAvailable(t, h, gpu, 60*time.Second)
	aReturnedOnce(t, h, gpu)
}

// An ARQ whose attach handle names a function this host does not have:
// nothing is touched on its word, it is reported, and the card
// Placement shows held is fenced, cleaned and returned from Placement.
func TestE2ECyborgARQForeignHandleTouchesNothing(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	cy := harness.StartCyborg(t)
	const fpga = "0000:3b:00.0"
	h := c.addCyborgHost(t, cy, []cyborgCard{{fpga, "FPGA", 4}})
	inst := harness.NewUUID()
	c.bindAccelerator(t, cy, h, inst, fpga, "0000:5e:00.0", false)
	c.waitReserved(t, h, h.Device(fpga), 4, "the FPGA fenced from Placement")
	line := waitLog(t, h, 30*time.Second, `msg="Cyborg ARQ disagrees`, "arq=arq-"+inst, "instance="+inst, "attach_handle=0000:5e:00.0")
	if !strings.Contains(line, "level=WARN") {
		t.Errorf("the mismatch is not a WARN: %s", line)
	}
	if strings.Contains(h.Logs(), `msg="Cyborg ARQ recorded"`) {
		t.Error("the disagreeing ARQ was recorded as agreeing")
	}
	c.releaseAccelerator(t, cy, h, inst, "instance.delete.end")
	c.WaitAvailable(t, h, fpga, 60*time.Second)
}

// Cyborg unreachable at the bind: the fence still happens (Placement
// alone); once Cyborg answers, a scan records the ARQ.
func TestE2ECyborgDownAtBindFencesThenRecords(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	cy := harness.StartCyborg(t)
	const fpga = "0000:3b:00.0"
	h := c.addCyborgHost(t, cy, []cyborgCard{{fpga, "FPGA", 4}}, WithReconcileInterval(time.Second))
	cy.SetDown(true)
	inst := harness.NewUUID()
	c.bindAccelerator(t, cy, h, inst, fpga, "", false)
	c.waitReserved(t, h, h.Device(fpga), 4, "the FPGA fenced with Cyborg down")
	waitLog(t, h, 30*time.Second, `msg="Cyborg ARQ not recorded at bind`)
	cy.SetDown(false)
	waitLog(t, h, 30*time.Second, `msg="Cyborg ARQ recorded"`, "instance="+inst, "attach_handle="+fpga)
}

// kill -9 between the fence and the clean: the card stays fenced while
// scourd is down; restarted, scourd cleans it before any unit returns.
// kill -9 between the clean and the return (the un-reserve cannot land):
// restarted, scourd returns it on the stored clean, once, nothing lost.
func TestE2ECyborgKillBetweenFenceCleanAndReturn(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	cy := harness.StartCyborg(t)
	const fpga = "0000:3b:00.0"
	h := c.addCyborgHost(t, cy, []cyborgCard{{fpga, "FPGA", 4}}, WithReconcileInterval(time.Hour))
	card := h.Device(fpga)

	first := harness.NewUUID()
	c.bindAccelerator(t, cy, h, first, fpga, "", false)
	c.waitReserved(t, h, card, 4, "fenced at the bind")
	h.Kill(t)
	c.releaseAccelerator(t, cy, h, first, "instance.delete.end") // while scourd is down
	if r := c.Reserved(t, card); r != 4 {
		t.Fatalf("released while scourd is down: reserved %d, want 4 (still fenced)", r)
	}
	killedAt := h.LogLen()
	h.Start(t)
	c.WaitAvailable(t, h, fpga, 60*time.Second)
	if n := countLines(h.LogsFrom(killedAt), `msg="step started"`); n == 0 {
		t.Fatal("the card returned after the restart without a clean")
	}

	second := harness.NewUUID()
	c.bindAccelerator(t, cy, h, second, fpga, "", false)
	c.waitReserved(t, h, card, 4, "fenced at the second bind")
	c.P.Inject(harness.Fault{Method: http.MethodPut, Status: http.StatusServiceUnavailable}) // the un-reserve cannot land
	t.Cleanup(c.P.Heal)
	c.releaseAccelerator(t, cy, h, second, "instance.delete.end")
	waitLog(t, h, 60*time.Second, `msg="cleaning run finished"`, "verdict=clean")
	h.Kill(t)
	if r := c.Reserved(t, card); r != 4 {
		t.Fatalf("cleaned, killed before the return: reserved %d, want 4", r)
	}
	c.P.Heal()
	killedAt = h.LogLen()
	h.Start(t)
	c.WaitAvailable(t, h, fpga, 60*time.Second)
	if st := aRecordStates(t, h, fpga); len(st) != 2 || aCount(st, "returned") != 2 {
		t.Fatalf("records: %v; want two, both returned (nothing lost)", st)
	}
	if inv := c.P.Inventory(t, card.UUID, "FPGA"); inv.Reserved != 0 || inv.Total != 4 {
		t.Fatalf("after the restart: %+v, want all 4 units back", inv)
	}
}
