package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// Broadcasts (resize revert, evacuate, a delete nova-api sends without a
// host) with one PostgreSQL claims database for the fleet: the dispatcher
// sends them only to the hosts holding a live claim of the instance
// (bus.broadcast_routing auto), and the right host still releases. With
// per-host sqlite stores they still reach every host, and a host without
// a claim drops them without reading Placement.

// routedTwoHosts is twoHosts on one shared claims database.
func routedTwoHosts(t *testing.T, c *Cloud) (a, b *Host) {
	t.Helper()
	dsn := sharedClaimsDB(t)
	a = c.AddHost(t, []SimDevice{{Address: addrA}}, WithReconcileInterval(time.Hour), WithSharedClaims(dsn))
	b = c.AddHost(t, []SimDevice{{Address: addrB}, {Address: addrN}}, WithReconcileInterval(time.Hour), WithSharedClaims(dsn))
	return a, b
}

// broadcastsOf sums, over hosts, the dispatchers' broadcasts by route and
// the broadcasts received without a live claim (dropped unread).
func broadcastsOf(t *testing.T, hosts ...*Host) (routes map[string]float64, unclaimed float64) {
	t.Helper()
	routes = map[string]float64{}
	for _, h := range hosts {
		text := aMetrics(t, h)
		for _, r := range []string{"routed", "off", "unresolved", "lookup_failed"} {
			n, _ := aMetric(text, "scour_commands_broadcasts_total", fmt.Sprintf("route=%q", r))
			routes[r] += n
		}
		n, _ := aMetric(text, "scour_lifecycle_broadcasts_total", `claim="none"`)
		unclaimed += n
	}
	return routes, unclaimed
}

// Revert across two hosts, then a host-less delete, routed: the revert
// reaches A and B (both hold a claim), B cleans its device and A keeps
// the instance's; the delete reaches A only, which cleans. No host ever
// receives a broadcast for an instance it holds no claim of.
func TestRoutedRevertAndHostlessDelete(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	a, b := routedTwoHosts(t, c)
	inst := resizeRevert(t, c, a, b, harness.Versioned)

	// nova-api deletes the instance and sends delete.end with no host.
	c.P.DeleteAllocations(t, inst)
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", Sample: "instance-delete-end_not_scheduled",
		InstanceUUID: inst, NullHost: true, PublisherID: "nova-api:controller"}, harness.Versioned)
	cleanedFor(t, c, a, addrA, inst)
	if r := c.Reserved(t, b.Device(addrN)); r != 0 || b.Records(t, addrN) != nil {
		t.Error("B's unused neighbour device was touched")
	}

	routes, unclaimed := broadcastsOf(t, a, b)
	if routes["routed"] != 2 || routes["off"]+routes["unresolved"]+routes["lookup_failed"] != 0 {
		t.Errorf("dispatched broadcasts by route %v, want the revert and the delete routed, none sent to every host", routes)
	}
	if unclaimed != 0 {
		t.Errorf("%v broadcasts reached a host without a live claim of the instance; want 0 (routed)", unclaimed)
	}
}

// Evacuate while A's scourd is down, routed: B (the only dispatcher
// running) sends the evacuate to A's queue only, where it waits; B, whose
// claim comes with the rebuild, never receives it. A cleans its device
// when it comes back.
func TestRoutedEvacuate(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	a, b := routedTwoHosts(t, c)
	evacuateSourceDown(t, c, a, b, func(string) {
		Eventually(t, 30*time.Second, "B dispatched the evacuate", func() (bool, string) {
			routes, _ := broadcastsOf(t, b)
			return routes["routed"] == 1, fmt.Sprint(routes)
		})
	})
	if routes, unclaimed := broadcastsOf(t, b); routes["routed"] != 1 || unclaimed != 0 {
		t.Errorf("B: broadcasts by route %v and %v received without a claim; want the evacuate routed to A only", routes, unclaimed)
	}
}

// With per-host sqlite stores (no database knows the fleet) a host-less
// delete still goes to every host: A, holding the claim, cleans; B drops
// it without reading Placement.
func TestHostlessDeleteBroadcastFallback(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	a, b := twoHosts(t, c)
	inst := harness.NewUUID()
	bootOnA(t, c, a, inst)
	c.P.DeleteAllocations(t, inst)
	c.Bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", Sample: "instance-delete-end_not_scheduled",
		InstanceUUID: inst, NullHost: true, PublisherID: "nova-api:controller"}, harness.Versioned)
	cleanedFor(t, c, a, addrA, inst)
	Eventually(t, 30*time.Second, "B received the broadcast and dropped it", func() (bool, string) {
		_, unclaimed := broadcastsOf(t, b)
		return unclaimed == 1, fmt.Sprintf("scour_lifecycle_broadcasts_total{claim=none} = %v", unclaimed)
	})
	if routes, _ := broadcastsOf(t, a, b); routes["off"] != 1 || routes["routed"] != 0 {
		t.Errorf("dispatched broadcasts by route %v, want one sent to every host (routing off with sqlite)", routes)
	}
}
