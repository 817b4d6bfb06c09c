package harness

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// placementAs sends GET or PUT to the Placement backend with token and
// returns the status and body.
func placementAs(t *testing.T, p *Placement, token, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, p.BackendURL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	req.Header.Set("OpenStack-API-Version", "placement "+Microversion)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The Keystone harness: Placement behind a real Keystone refuses requests
// without a token or with a revoked one, applies the documented policy
// (role scour may update inventories, reader may not, admin still may),
// and the catalog holds what RegisterInCatalog put there.
func TestKeystoneFrontsPlacement(t *testing.T) {
	k := StartKeystone(t)
	p := StartPlacement(t, BehindKeystone(k, DocumentedPlacementPolicy(t)))
	node := p.SeedComputeNode(t, UniqueName("cn"), Device{Address: "0000:81:00.0", VendorID: "144d", ProductID: "a80a", OneTimeUse: true})
	dev := node.Devices[0]
	inv := "/resource_providers/" + dev.UUID + "/inventories"

	if st, body := placementAs(t, p, "", http.MethodGet, inv, ""); st != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s, want 401", st, body)
	}
	service := k.Project(t, ServiceProject, DefaultDomainID)
	token := func(role string) string {
		name := UniqueName("u-" + role)
		k.User(t, name, "pw", DefaultDomainID, service, role)
		tok, _, err := k.Authenticate(t.Context(), Credentials{User: name, Password: "pw", Project: ServiceProject})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	scour, reader := token("scour"), token("reader")
	st, body := placementAs(t, p, scour, http.MethodGet, inv, "")
	if st != http.StatusOK {
		t.Fatalf("role scour, documented policy: GET inventories %d %s", st, body)
	}
	gen := strings.Split(strings.Split(body, `"resource_provider_generation": `)[1], ",")[0]
	put := `{"resource_provider_generation": ` + gen + `, "total": 1, "reserved": 1, "max_unit": 1}`
	if st, body := placementAs(t, p, reader, http.MethodPut, inv+"/"+dev.ResourceClass, put); st != http.StatusForbidden ||
		!strings.Contains(body, "placement:resource_providers:inventories:update") {
		t.Fatalf("role reader: PUT inventory %d %s, want 403 naming the rule", st, body)
	}
	if st, body := placementAs(t, p, scour, http.MethodPut, inv+"/"+dev.ResourceClass, put); st != http.StatusOK {
		t.Fatalf("role scour: PUT inventory %d %s", st, body)
	}
	k.Revoke(t, scour)
	if k.Valid(t, scour) {
		t.Fatal("Keystone still accepts a revoked token")
	}
	if st, body := placementAs(t, p, scour, http.MethodGet, inv, ""); st != http.StatusUnauthorized {
		t.Fatalf("revoked token: %d %s, want 401 (keystonemiddleware must not cache validations)", st, body)
	}
	if got := p.Inventory(t, dev.UUID, dev.ResourceClass).Reserved; got != 1 {
		t.Errorf("admin read: reserved %d, want 1", got)
	}
}
