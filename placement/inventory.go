package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// rawInventory is an RP's inventory exactly as Placement returned it. Writes
// send Fields back untouched except reserved: Placement resets omitted
// fields to defaults and gophercloud's Inventory (no omitempty, float32
// allocation_ratio) would change them, so scour never re-encodes them.
type rawInventory struct {
	Generation int
	Count      int // inventories on the RP
	Fields     map[string]json.RawMessage
	Inv        Inventory
}

// Placement moves a resource provider's generation on every inventory
// write, trait write and allocation write (PUT or POST /allocations), but
// not when a consumer's allocations are deleted (DELETE /allocations/{c},
// what Nova does when an instance is deleted or shelve-offloaded). Every
// GET reads the provider's generation before the data it returns. So an
// inventory read at generation G is still the inventory while the
// provider is at G, whatever allocations were deleted meanwhile.
//
// The client remembers each device's last inventory read (invCache) and,
// when the allocations read with a device shows that generation again,
// reads the inventory no more (readPair): a device Nova deleted the
// instance of since the claim's burn check read it costs one read at
// release instead of two. A remembered inventory is only ever used at
// its own generation; any other generation reads it afresh. Writes carry
// the generation the device was read at, so nothing is written from a
// stale record either way.

// invCacheMax bounds the remembered inventories: a host's device count is
// far below it; past it (RPs re-created again and again) all are dropped.
const invCacheMax = 4096

type invCache = genCache[*rawInventory]

func (r *rawInventory) generation() int { return r.Generation }

// genCache remembers, per RP, the last record read of it at a generation
// (its last inventory read, the trait facts of its claim: claimtraits.go).
type genCache[T interface {
	comparable
	generation() int
}] struct {
	mu sync.Mutex
	m  map[string]T
}

// get returns what is remembered of uuid (T's zero value: nothing).
func (gc *genCache[T]) get(uuid string) T {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return gc.m[uuid]
}

// put remembers r unless a read at a newer generation is remembered: reads
// of one device may finish out of order.
func (gc *genCache[T]) put(uuid string, r T) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	var none T
	if old := gc.m[uuid]; old != none && old.generation() > r.generation() {
		return
	}
	if gc.m == nil || len(gc.m) >= invCacheMax {
		gc.m = map[string]T{}
	}
	gc.m[uuid] = r
}

func (gc *genCache[T]) forget(uuid string) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	delete(gc.m, uuid)
}

// keepOnly drops what is remembered of RPs not in uuids (a scan's tree).
func (gc *genCache[T]) keepOnly(uuids map[string]bool) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	for u := range gc.m {
		if !uuids[u] {
			delete(gc.m, u)
		}
	}
}

func (c *Client) readInventory(ctx context.Context, uuid string) (*rawInventory, error) {
	var body struct {
		Generation  int                                   `json:"resource_provider_generation"`
		Inventories map[string]map[string]json.RawMessage `json:"inventories"`
	}
	if err := c.do(ctx, http.MethodGet, "resource_providers/"+uuid+"/inventories", nil, &body, http.StatusOK); err != nil {
		return nil, err
	}
	r := &rawInventory{Generation: body.Generation, Count: len(body.Inventories)}
	for rc, f := range body.Inventories {
		// With more than one inventory the device is unmanaged; keep the
		// lexically first so results are stable.
		if r.Fields != nil && rc > r.Inv.ResourceClass {
			continue
		}
		inv, err := decodeInventory(rc, f)
		if err != nil {
			return nil, &RecoverableError{Err: fmt.Errorf("placement GET /resource_providers/%s/inventories: %w", uuid, err)}
		}
		r.Fields, r.Inv = f, inv
	}
	c.invs.put(uuid, r)
	return r, nil
}

func decodeInventory(rc string, f map[string]json.RawMessage) (Inventory, error) {
	inv := Inventory{ResourceClass: rc}
	for k, dst := range map[string]any{
		"total": &inv.Total, "reserved": &inv.Reserved, "min_unit": &inv.MinUnit,
		"max_unit": &inv.MaxUnit, "step_size": &inv.StepSize, "allocation_ratio": &inv.AllocationRatio,
	} {
		raw, ok := f[k]
		if !ok {
			return inv, fmt.Errorf("inventory %s has no %s", rc, k)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return inv, fmt.Errorf("inventory %s field %s: %w", rc, k, err)
		}
	}
	return inv, nil
}

// writeReserved PUTs the inventory read in r with only reserved changed,
// at r's generation. A 409 means the RP changed since r was read.
func (c *Client) writeReserved(ctx context.Context, uuid string, r *rawInventory, reserved int) error {
	body := make(map[string]json.RawMessage, len(r.Fields)+1)
	for k, v := range r.Fields {
		body[k] = v
	}
	body["reserved"] = json.RawMessage(strconv.Itoa(reserved))
	body["resource_provider_generation"] = json.RawMessage(strconv.Itoa(r.Generation))
	if h := c.beforeInventoryWrite; h != nil {
		h(ctx, uuid)
	}
	// Whatever the outcome, the remembered record is older than the RP.
	c.invs.forget(uuid)
	c.traitsAt.forget(uuid)
	return c.do(ctx, http.MethodPut, "resource_providers/"+uuid+"/inventories/"+r.Inv.ResourceClass, body, nil, http.StatusOK)
}

// consumers lists who holds the RP: GET .../allocations.
func (c *Client) consumers(ctx context.Context, uuid, rc string) (gen, used int, who []string, err error) {
	a, err := c.allocationsOf(ctx, uuid)
	if err != nil {
		return 0, 0, nil, err
	}
	used, who = a.usage(rc)
	return a.Generation, used, who, nil
}

// allocations is GET .../allocations of one RP.
type allocations struct {
	Generation  int `json:"resource_provider_generation"`
	Allocations map[string]struct {
		Resources map[string]int `json:"resources"`
	} `json:"allocations"`
}

func (c *Client) allocationsOf(ctx context.Context, uuid string) (allocations, error) {
	var body allocations
	err := c.do(ctx, http.MethodGet, "resource_providers/"+uuid+"/allocations", nil, &body, http.StatusOK)
	return body, err
}

// usage sums the allocations of resource class rc ("": of every class)
// and names their consumers.
func (a allocations) usage(rc string) (used int, who []string) {
	for consumer, al := range a.Allocations {
		who = append(who, consumer)
		if rc == "" {
			for _, n := range al.Resources {
				used += n
			}
		} else {
			used += al.Resources[rc]
		}
	}
	return used, who
}

// traitsOf reads an RP's traits and generation.
func (c *Client) traitsOf(ctx context.Context, uuid string) (gen int, traits []string, err error) {
	var body struct {
		Generation int      `json:"resource_provider_generation"`
		Traits     []string `json:"traits"`
	}
	err = c.do(ctx, http.MethodGet, "resource_providers/"+uuid+"/traits", nil, &body, http.StatusOK)
	return body.Generation, body.Traits, err
}

// putTraits replaces an RP's traits at generation gen.
func (c *Client) putTraits(ctx context.Context, uuid string, gen int, traits []string) error {
	if traits == nil {
		traits = []string{}
	}
	body := map[string]any{"resource_provider_generation": gen, "traits": traits}
	c.traitsAt.forget(uuid) // older than the RP, whatever the outcome
	return c.do(ctx, http.MethodPut, "resource_providers/"+uuid+"/traits", body, nil, http.StatusOK)
}
