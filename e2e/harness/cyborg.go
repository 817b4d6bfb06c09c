package harness

import (
	"net/http"
	"testing"

	"github.com/scour-project/scour/cyborg/cyborgtest"
)

// TraitOwnerCyborg is the trait Cyborg's NVIDIA and PCI drivers put on
// their deployables' providers.
const TraitOwnerCyborg = "OWNER_CYBORG"

// SeedCyborgDevice reports one deployable under node as Cyborg's
// conductor does: a child provider named "<node>_<pci address>" (the
// driver's name), one inventory of rc written as total and max_unit only
// (total = num_accelerators), and traits (custom ones created). Its UUID
// is random (Cyborg's is uuid3 of the name; scour reads it from
// Placement either way). The device is appended to node.Devices.
func (p *Placement) SeedCyborgDevice(t testing.TB, node *ComputeNode, addr, rc string, total int, traits ...string) *DeviceRP {
	t.Helper()
	rp := &DeviceRP{Device: Device{Address: addr, ResourceClass: rc, Traits: traits}, Name: node.Name + "_" + addr,
		UUID: NewUUID(), ResourceClass: rc}
	p.call(t, http.MethodPost, "/resource_providers", Microversion,
		map[string]any{"name": rp.Name, "uuid": rp.UUID, "parent_provider_uuid": node.UUID}, nil, http.StatusOK)
	body := map[string]any{"resource_provider_generation": p.generation(t, rp.UUID),
		"inventories": map[string]any{rc: map[string]int{"total": total, "max_unit": total}}}
	p.call(t, http.MethodPut, "/resource_providers/"+rp.UUID+"/inventories", Microversion, body, nil)
	for _, tr := range traits {
		if tr != TraitOwnerCyborg {
			p.call(t, http.MethodPut, "/traits/"+tr, Microversion, nil, nil, http.StatusCreated, http.StatusNoContent)
		}
	}
	p.SetTraits(t, rp.UUID, traits...)
	node.Devices = append(node.Devices, rp)
	return rp
}

// StartCyborg starts a stand-in for Cyborg's accelerator API
// (cyborg/cyborgtest: its answers follow openstack/cyborg's source) for
// t; point scourd's placement.cyborg.endpoint at its Endpoint.
func StartCyborg(t testing.TB) *cyborgtest.Server {
	t.Helper()
	s := cyborgtest.Start()
	t.Cleanup(s.Close)
	return s
}

// CyborgServicePassword is the password of the cyborg service user
// (project service, role admin) the stand-in validates tokens as
// (StartCyborgBehindKeystone).
const CyborgServicePassword = "cyborg"

// StartCyborgBehindKeystone starts the stand-in with every token
// validated by k as cyborg-api's keystonemiddleware would (as service
// user cyborg), and registers its endpoint (service type accelerator) in
// k's catalog in region for each interface.
func StartCyborgBehindKeystone(t testing.TB, k *Keystone, region string, interfaces ...string) *cyborgtest.Server {
	t.Helper()
	k.ServiceUser(t, "cyborg", CyborgServicePassword)
	s := cyborgtest.StartBehindKeystone(cyborgtest.Keystone{URL: k.BackendURL(), User: "cyborg",
		Password: CyborgServicePassword, ProjectName: ServiceProject})
	t.Cleanup(s.Close)
	k.RegisterService(t, "accelerator", "cyborg", endpoints(region, s.Endpoint(), interfaces)...)
	return s
}
