package harness

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceproviders"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestPlacementServesMicroversion139(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/", nil)
	req.Header.Set("X-Auth-Token", p.Token())
	resp, err := p.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var root struct {
		Versions []struct {
			ID         string `json:"id"`
			MinVersion string `json:"min_version"`
			MaxVersion string `json:"max_version"`
		} `json:"versions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&root); err != nil {
		t.Fatal(err)
	}
	if len(root.Versions) != 1 || root.Versions[0].MaxVersion != "1.39" || root.Versions[0].MinVersion != "1.0" {
		t.Fatalf("versions = %+v, want one with min 1.0 max 1.39", root.Versions)
	}
}

func TestPlacementNoauth2RejectsMissingToken(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	resp, err := http.Get(p.URL() + "/resource_providers")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s, want 401", resp.Status)
	}
}

func TestSeedComputeNodeCreatesNovasTree(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	name := UniqueName("cn")
	node := p.SeedComputeNode(t, name,
		Device{Address: "0000:af:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true, Traits: []string{"nvme_fast"}},
		Device{Address: "0000:81:00.0", VendorID: "144d", ProductID: "a80a", ResourceClass: "nvme-dc"},
	)

	// Read back through the proxy with gophercloud, as scour will.
	sc := p.ServiceClient()
	pages, err := resourceproviders.List(sc, resourceproviders.ListOpts{InTree: node.UUID}).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rps, err := resourceproviders.ExtractResourceProviders(pages)
	if err != nil {
		t.Fatal(err)
	}
	type rp struct{ Name, Parent string }
	var got []rp
	for _, r := range rps {
		got = append(got, rp{r.Name, r.ParentProviderUUID})
	}
	want := []rp{
		{name, ""},
		{name + "_0000:AF:00.0", node.UUID},
		{name + "_0000:81:00.0", node.UUID},
	}
	sortRP := func(a, b rp) int { return cmpString(a.Name, b.Name) }
	slices.SortFunc(got, sortRP)
	slices.SortFunc(want, sortRP)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tree (-want +got):\n%s", d)
	}

	otu, plain := node.Device("0000:AF:00.0"), node.Device("0000:81:00.0")
	if otu.ResourceClass != "CUSTOM_PCI_8086_0A54" || plain.ResourceClass != "CUSTOM_NVME_DC" {
		t.Errorf("resource classes = %s, %s", otu.ResourceClass, plain.ResourceClass)
	}
	novaInv := Inventory{Total: 1, Reserved: 0, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1.0}
	for _, d := range []*DeviceRP{otu, plain} {
		inv, _ := p.Inventories(t, d.UUID)
		if diff := cmp.Diff(map[string]Inventory{d.ResourceClass: novaInv}, inv); diff != "" {
			t.Errorf("%s inventory (-want +got):\n%s", d.Name, diff)
		}
	}
	if d := cmp.Diff([]string{"COMPUTE_MANAGED_PCI_DEVICE", "CUSTOM_NVME_FAST", "HW_PCI_ONE_TIME_USE"}, p.Traits(t, otu.UUID)); d != "" {
		t.Errorf("OTU device traits (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"COMPUTE_MANAGED_PCI_DEVICE"}, p.Traits(t, plain.UUID)); d != "" {
		t.Errorf("plain device traits (-want +got):\n%s", d)
	}
	nodeInv, _ := p.Inventories(t, node.UUID)
	if d := cmp.Diff(computeInventory, nodeInv); d != "" {
		t.Errorf("compute node inventory (-want +got):\n%s", d)
	}
	if got, ok := p.ProviderByName(t, otu.Name); !ok || got.UUID != otu.UUID || got.RootUUID != node.UUID {
		t.Errorf("ProviderByName(%s) = %+v, %v", otu.Name, got, ok)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestNovaActionsOnPlacement(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	otu := Device{Address: "0000:af:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true}
	src := p.SeedComputeNode(t, UniqueName("src"), otu)
	dst := p.SeedComputeNode(t, UniqueName("dst"), otu)
	inst, project, user := NewUUID(), NewUUID(), NewUUID()
	sdev, ddev := src.Devices[0], dst.Devices[0]
	holds := func(consumer, rc string) map[string]map[string]int {
		return map[string]map[string]int{consumer: {rc: 1}}
	}

	p.AllocateInstance(t, inst, project, user, src, sdev)
	if d := cmp.Diff(holds(inst, sdev.ResourceClass), p.Allocations(t, sdev.UUID)); d != "" {
		t.Errorf("device allocations (-want +got):\n%s", d)
	}

	// Resize: the source side moves to the migration consumer, the instance
	// claims the destination, whose device the move claim burns.
	mig := p.MoveAllocations(t, inst, dst, ddev)
	p.Burn(t, ddev)
	if d := cmp.Diff(holds(mig, sdev.ResourceClass), p.Allocations(t, sdev.UUID)); d != "" {
		t.Errorf("source device after move (-want +got):\n%s", d)
	}
	wantInst := map[string]map[string]int{dst.UUID: instanceResources, ddev.UUID: {ddev.ResourceClass: 1}}
	if d := cmp.Diff(wantInst, p.ConsumerAllocations(t, inst)); d != "" {
		t.Errorf("instance after move (-want +got):\n%s", d)
	}
	if got := p.Inventory(t, ddev.UUID, ddev.ResourceClass); got != (Inventory{Total: 1, Reserved: 1, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1}) {
		t.Errorf("burned inventory = %+v: reserved must equal total and nothing else change", got)
	}

	// Confirm frees the source.
	p.DeleteAllocations(t, mig)
	if got := p.Allocations(t, sdev.UUID); len(got) != 0 {
		t.Errorf("source device after confirm holds %v", got)
	}

	p.DeleteAllocations(t, inst)
	if got := p.Allocations(t, ddev.UUID); len(got) != 0 {
		t.Errorf("after delete the device still holds %v", got)
	}
	// Burned, unallocated: what scour must clean.
	if got := p.Inventory(t, ddev.UUID, ddev.ResourceClass); got.Reserved != got.Total {
		t.Errorf("delete must leave the device burned, got %+v", got)
	}
}

func TestRevertMoveGivesBackTheSource(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	dev := Device{Address: "0000:3b:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true}
	src := p.SeedComputeNode(t, UniqueName("src"), dev)
	dst := p.SeedComputeNode(t, UniqueName("dst"), dev)
	inst := NewUUID()
	p.AllocateInstance(t, inst, NewUUID(), NewUUID(), src, src.Devices[0])
	mig := p.MoveAllocations(t, inst, dst, dst.Devices[0])
	p.RevertMove(t, inst, mig)
	want := map[string]map[string]int{src.UUID: instanceResources, src.Devices[0].UUID: {src.Devices[0].ResourceClass: 1}}
	if d := cmp.Diff(want, p.ConsumerAllocations(t, inst)); d != "" {
		t.Errorf("instance after revert (-want +got):\n%s", d)
	}
	if got := p.Allocations(t, dst.Devices[0].UUID); len(got) != 0 {
		t.Errorf("destination device after revert holds %v", got)
	}
}

// Records a Placement fact scenario authors must know: once a device is
// burned (reserved == total), no consumer can be given an allocation on it,
// not even the migration consumer Nova moves the instance's allocation to.
// Placement 8.0.0 deletes the moved consumers' allocations first and then
// finds capacity (total - reserved) * ratio = 0.
func TestPlacementRefusesMovingABurnedDevicesAllocation(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	dev := Device{Address: "0000:5e:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true}
	src := p.SeedComputeNode(t, UniqueName("src"), dev)
	inst := NewUUID()
	p.AllocateInstance(t, inst, NewUUID(), NewUUID(), src, src.Devices[0])
	p.Burn(t, src.Devices[0])
	var cur consumerAllocs
	p.call(t, http.MethodGet, "/allocations/"+inst, Microversion, nil, &cur)
	body := map[string]any{NewUUID(): map[string]any{
		"allocations": cur.Allocations, "consumer_generation": nil,
		"project_id": cur.ProjectID, "user_id": cur.UserID, "consumer_type": "MIGRATION",
	}, inst: map[string]any{
		"allocations": map[string]any{}, "consumer_generation": cur.ConsumerGeneration,
		"project_id": cur.ProjectID, "user_id": cur.UserID, "consumer_type": "INSTANCE",
	}}
	if code := p.call(t, http.MethodPost, "/allocations", Microversion, body, nil, http.StatusNoContent, http.StatusConflict); code != http.StatusConflict {
		t.Fatalf("moving a burned device's allocation answered %d; Placement now allows it: update docs/e2e.md and MoveAllocations", code)
	}
}

// consume binds a fresh queue of the test's own to the nova exchange and
// returns its deliveries.
func consume(t *testing.T, b *Broker, key string) <-chan amqp.Delivery {
	t.Helper()
	ch, err := b.Dial(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := DeclareNovaExchange(ch, NovaExchange); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare(UniqueName("scour-test"), false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, key, NovaExchange, false, nil); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func receive(t *testing.T, d <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case m := <-d:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
	}
	return amqp.Delivery{}
}

func TestPublishedNotificationArrivesByteIdentical(t *testing.T) {
	t.Parallel()
	b := StartRabbitMQ(t).VHost(t)
	for _, f := range []Format{Versioned, Legacy} {
		t.Run(f.String(), func(t *testing.T) {
			n0, _ := BuildNotification(Event{Type: "instance.delete.end"}, f)
			d := consume(t, b, n0.RoutingKey)
			n := b.PublishNotification(t, Event{Type: "instance.delete.end", InstanceUUID: NewUUID(), Host: "cn-é", Node: "cn-é"}, f)
			m := receive(t, d)
			if string(m.Body) != string(n.Body) {
				t.Fatalf("body differs:\n got %s\nwant %s", m.Body, n.Body)
			}
			if m.Exchange != "nova" || m.RoutingKey != n.RoutingKey {
				t.Errorf("exchange/key = %s/%s", m.Exchange, m.RoutingKey)
			}
			if m.ContentType != "application/json" || m.ContentEncoding != "utf-8" || m.DeliveryMode != 2 || m.MessageId != "" || !m.Timestamp.IsZero() || len(m.Headers) != 0 {
				t.Errorf("properties differ from oslo's: type=%q enc=%q mode=%d id=%q ts=%v headers=%v",
					m.ContentType, m.ContentEncoding, m.DeliveryMode, m.MessageId, m.Timestamp, m.Headers)
			}
		})
	}
}

func TestVHostsIsolateTests(t *testing.T) {
	t.Parallel()
	shared := StartRabbitMQ(t)
	shared.needContainer(t, "vhost isolation")
	a, other := shared.VHost(t), shared.VHost(t)
	d := consume(t, a, "versioned_notifications.info")
	other.PublishNotification(t, Event{Type: "instance.delete.end"}, Versioned)
	want := a.PublishNotification(t, Event{Type: "instance.create.end"}, Versioned)
	if m := receive(t, d); string(m.Body) != string(want.Body) {
		t.Fatalf("received a message of another vhost: %.120s", m.Body)
	}
}
