package harness_test

import (
	"testing"

	"github.com/scour-project/scour/e2e/harness"
)

// The example of docs/e2e.md, kept compiling and passing. A package using
// the harness adds: func TestMain(m *testing.M) { harness.Main(m) }
// (here the package's internal tests already declare TestMain).
func TestExampleDeleteLeavesDirtyDevices(t *testing.T) {
	t.Parallel()
	bus := harness.StartRabbitMQ(t).VHost(t) // private vhost on the shared broker
	p := harness.StartPlacement(t)           // shared Placement, private fault proxy
	node := p.SeedComputeNode(t, harness.UniqueName("cn"),
		harness.Device{Address: "0000:af:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true},
		harness.Device{Address: "0000:b0:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true},
	)
	inst := harness.NewUUID()
	p.AllocateInstance(t, inst, "project", "user", node, node.Devices...)
	for _, d := range node.Devices {
		p.Burn(t, d) // nova-compute burns one-time-use devices on claim
	}
	// The instance goes away: Nova drops its allocations and notifies.
	p.DeleteAllocations(t, inst)
	bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: node.Name, Node: node.Name}, harness.Versioned)

	// (Scour, pointed at bus.URL() and p.URL(), would clean and un-reserve here.)
	for _, d := range node.Devices {
		inv := p.Inventory(t, d.UUID, d.ResourceClass)
		if inv.Reserved != inv.Total || len(p.Allocations(t, d.UUID)) != 0 {
			t.Errorf("%s: reserved=%d total=%d allocations=%v, want a dirty device", d.Name, inv.Reserved, inv.Total, p.Allocations(t, d.UUID))
		}
	}
}
