package cyborg_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/scour-project/scour/cyborg"
	"github.com/scour-project/scour/cyborg/cyborgtest"
	"github.com/scour-project/scour/placement"
)

func client(t *testing.T, s *cyborgtest.Server) *cyborg.Client {
	t.Helper()
	cfg := placement.Config{Node: "compute1", Endpoint: "http://placement.invalid:8778", Token: "admin"}
	return cyborg.New(func(ctx context.Context) (*gophercloud.ServiceClient, error) {
		return placement.NewServiceClient(ctx, cfg, cyborg.ServiceType, s.Endpoint(), nil)
	}, 0)
}

const inst = "d1e3ff56-feef-4495-8e4f-1cf6ea59ffbc"

// The client sends what Cyborg expects (the catalog's /v2 endpoint, the
// instance and bind_state filters, "OpenStack-API-Version: accelerator
// 2.0", the token) and reads the instance's ARQs with their PCI attach
// handle; another instance's ARQ and an unbound one are not its.
func TestInstanceARQs(t *testing.T) {
	s := cyborgtest.Start()
	defer s.Close()
	s.Bind(cyborgtest.ARQ{UUID: "7e88a0a5-6dd9-497e-a7e0-fa2d75728a3b", State: "Bound", Hostname: "compute1",
		DeviceRPUUID: "03631f82-20a9-3f67-a29d-dc1abe4041bf", Instance: inst, AttachType: "PCI",
		AttachUUID: "c5e65f39-2647-4e93-b8b3-26e428409042", Attach: cyborgtest.PCI("0000:0c:00.0")},
		cyborgtest.ARQ{UUID: "other", State: "Bound", Instance: "00000000-0000-4000-8000-000000000009", AttachType: "PCI", Attach: cyborgtest.PCI("0000:0d:00.0")},
		cyborgtest.ARQ{UUID: "unbound", State: "Initial"})
	got, err := client(t, s).InstanceARQs(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].UUID != "7e88a0a5-6dd9-497e-a7e0-fa2d75728a3b" || got[0].State != cyborg.StateBound ||
		got[0].Hostname != "compute1" || got[0].DeviceRPUUID != "03631f82-20a9-3f67-a29d-dc1abe4041bf" {
		t.Fatalf("ARQs = %+v", got)
	}
	addr, err := got[0].PCIAddress()
	if err != nil || addr != "0000:0c:00.0" {
		t.Fatalf("PCIAddress = %q, %v; want 0000:0c:00.0", addr, err)
	}
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("requests = %+v", reqs)
	}
	r := reqs[0]
	q, _ := url.ParseQuery(r.Query)
	if r.Path != "/accelerator/v2/accelerator_requests" || q.Get("instance") != inst || q.Get("bind_state") != "resolved" ||
		r.Version != "accelerator 2.0" || r.Token != "admin" {
		t.Errorf("request = %+v", r)
	}
}

// An ARQ still binding: Cyborg answers 423, the client says ErrUnresolved.
// Cyborg down: an error naming the endpoint. A handle that is no PCI
// function (MDEV) has no address.
func TestInstanceARQsFaults(t *testing.T) {
	s := cyborgtest.Start()
	defer s.Close()
	c := client(t, s)
	s.Bind(cyborgtest.ARQ{UUID: "a1", State: "BindStarted", Instance: inst})
	if _, err := c.InstanceARQs(context.Background(), inst); !errors.Is(err, cyborg.ErrUnresolved) {
		t.Errorf("binding: err = %v, want ErrUnresolved", err)
	}
	s.SetDown(true)
	if _, err := c.InstanceARQs(context.Background(), inst); err == nil || !strings.Contains(err.Error(), s.Endpoint()) {
		t.Errorf("down: err = %v, want an error naming %s", err, s.Endpoint())
	}
	mdev := cyborg.ARQ{UUID: "m", AttachHandleType: "MDEV", AttachHandleInfo: map[string]string{"asked_type": "nvidia-223"}}
	if _, err := mdev.PCIAddress(); err == nil {
		t.Error("an MDEV handle gave a PCI address")
	}
	bad := cyborg.ARQ{UUID: "b", AttachHandleType: "PCI", AttachHandleInfo: map[string]string{"bus": "0c"}}
	if _, err := bad.PCIAddress(); err == nil {
		t.Error("a PCI handle without domain, device and function gave an address")
	}
}

// With a static token the catalog is not read: the accelerator endpoint
// must be given.
func TestStaticTokenNeedsEndpoint(t *testing.T) {
	cfg := placement.Config{Node: "compute1", Endpoint: "http://placement.invalid:8778", Token: "admin"}
	_, err := placement.NewServiceClient(context.Background(), cfg, cyborg.ServiceType, "", nil)
	if err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("err = %v, want one asking for the endpoint", err)
	}
}
