package harness

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
)

// Inventory is one resource class's inventory on a provider, every field
// Placement keeps.
type Inventory struct {
	Total           int     `json:"total"`
	Reserved        int     `json:"reserved"`
	MinUnit         int     `json:"min_unit"`
	MaxUnit         int     `json:"max_unit"`
	StepSize        int     `json:"step_size"`
	AllocationRatio float64 `json:"allocation_ratio"`
}

// Provider is a resource provider as Placement lists it.
type Provider struct {
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	Generation int    `json:"generation"`
	ParentUUID string `json:"parent_provider_uuid"`
	RootUUID   string `json:"root_provider_uuid"`
}

func (p *Placement) generation(t testing.TB, rp string) int {
	t.Helper()
	var pr Provider
	p.call(t, http.MethodGet, "/resource_providers/"+rp, Microversion, nil, &pr)
	return pr.Generation
}

// Inventories returns every inventory of provider rp, and its generation.
func (p *Placement) Inventories(t testing.TB, rp string) (map[string]Inventory, int) {
	t.Helper()
	var out struct {
		Generation  int                  `json:"resource_provider_generation"`
		Inventories map[string]Inventory `json:"inventories"`
	}
	p.call(t, http.MethodGet, "/resource_providers/"+rp+"/inventories", Microversion, nil, &out)
	return out.Inventories, out.Generation
}

// Inventory returns provider rp's inventory of resource class rc; the test
// fails when there is none.
func (p *Placement) Inventory(t testing.TB, rp, rc string) Inventory {
	t.Helper()
	inv, _ := p.Inventories(t, rp)
	i, ok := inv[rc]
	if !ok {
		t.Fatalf("e2e harness: provider %s has no %s inventory (has %v)", rp, rc, inv)
	}
	return i
}

// Traits returns provider rp's traits, sorted.
func (p *Placement) Traits(t testing.TB, rp string) []string {
	t.Helper()
	var out struct {
		Traits []string `json:"traits"`
	}
	p.call(t, http.MethodGet, "/resource_providers/"+rp+"/traits", Microversion, nil, &out)
	slices.Sort(out.Traits)
	return out.Traits
}

// Allocations returns the allocations against provider rp: consumer UUID to
// resource class to amount.
func (p *Placement) Allocations(t testing.TB, rp string) map[string]map[string]int {
	t.Helper()
	var out struct {
		Allocations map[string]struct {
			Resources map[string]int `json:"resources"`
		} `json:"allocations"`
	}
	p.call(t, http.MethodGet, "/resource_providers/"+rp+"/allocations", Microversion, nil, &out)
	res := map[string]map[string]int{}
	for c, a := range out.Allocations {
		res[c] = a.Resources
	}
	return res
}

// ConsumerAllocations returns what consumer (an instance or migration) holds:
// provider UUID to resource class to amount.
func (p *Placement) ConsumerAllocations(t testing.TB, consumer string) map[string]map[string]int {
	t.Helper()
	var out consumerAllocs
	p.call(t, http.MethodGet, "/allocations/"+consumer, Microversion, nil, &out)
	res := map[string]map[string]int{}
	for rp, a := range out.Allocations {
		res[rp] = a.Resources
	}
	return res
}

type consumerAllocs struct {
	Allocations map[string]struct {
		Resources map[string]int `json:"resources"`
	} `json:"allocations"`
	ConsumerGeneration *int   `json:"consumer_generation"`
	ProjectID          string `json:"project_id"`
	UserID             string `json:"user_id"`
	ConsumerType       string `json:"consumer_type"`
}

// ProviderByName looks a provider up by its exact name.
func (p *Placement) ProviderByName(t testing.TB, name string) (Provider, bool) {
	t.Helper()
	var out struct {
		Providers []Provider `json:"resource_providers"`
	}
	p.call(t, http.MethodGet, "/resource_providers?name="+url.QueryEscape(name), Microversion, nil, &out)
	if len(out.Providers) == 0 {
		return Provider{}, false
	}
	return out.Providers[0], true
}

// Tree returns every provider in the tree rooted at root.
func (p *Placement) Tree(t testing.TB, root string) []Provider {
	t.Helper()
	var out struct {
		Providers []Provider `json:"resource_providers"`
	}
	p.call(t, http.MethodGet, "/resource_providers?in_tree="+url.QueryEscape(root), Microversion, nil, &out)
	return out.Providers
}
