package placement

import "slices"

// A claim reads the instance's allocations (GET /allocations/{instance},
// which gives each provider's generation) and then lists this host's
// devices that carry the one-time-use trait and not the quarantine trait
// (InstanceDevices). The listing began after the allocations read
// returned, and it evaluates its trait filter before it reads the
// generations it shows (eligible.go): a device it lists at the generation
// the allocations read gave was, at that generation, one-time-use and not
// quarantined. The client remembers that fact (traitsAt), and a later read
// of the device that returns the same generation knows its traits without
// reading them (Client.ReadDevice): the release's read is then complete,
// and the check before the first destructive step may answer from it
// (Gate.HasAllocationsAsOf). A fact is only ever used at its own generation;
// scour's own writes of the device forget it anyway.

// traitFacts is what a claim's listing proved of one device's traits at
// one generation.
type traitFacts struct {
	Generation int
	Traits     []string // the trait the listing required (one-time-use)
}

func (f *traitFacts) generation() int { return f.Generation }

// traitCache remembers each device's trait facts (at most invCacheMax).
type traitCache struct{ genCache[*traitFacts] }

// at returns the facts of uuid at generation gen, if that is what is
// remembered.
func (tc *traitCache) at(uuid string, gen int) (traitFacts, bool) {
	f := tc.get(uuid)
	if f == nil || f.Generation != gen {
		return traitFacts{}, false
	}
	return traitFacts{Generation: f.Generation, Traits: slices.Clone(f.Traits)}, true
}

// rememberClaimTraits records the trait facts of each device that the
// claim's listing (listed, with the quarantine trait forbidden) showed
// under the one-time-use trait at the generation the instance's
// allocations read (allocs) gave it. Devices listed only under a Cyborg
// trait are left out: a failed Cyborg listing stands in with an older
// one, which began before the allocations read.
func (c *Client) rememberClaimTraits(listed managed, allocs map[string]consumerAlloc) {
	for _, p := range listed.provs {
		a, ok := allocs[p.UUID]
		if !ok || a.Generation == nil || *a.Generation != p.Generation || !slices.Contains(listed.via[p.UUID], "") {
			continue
		}
		c.traitsAt.put(p.UUID, &traitFacts{Generation: p.Generation, Traits: []string{c.cfg.OneTimeUseTrait}})
	}
}

// withClaimTraits completes d, read with its inventory at one generation,
// with the trait facts remembered at that generation: one-time-use, not
// quarantined. Otherwise d is left as it is (traits unknown).
func (c *Client) withClaimTraits(d *Device) {
	if d.raw == nil || d.raw.Generation != d.Generation || d.traitsRead {
		return
	}
	f, ok := c.traitsAt.at(d.UUID, d.Generation)
	if !ok {
		return
	}
	d.traits, d.traitsRead = f.Traits, true
	d.Quarantined = false
	d.Why = ""
	c.derive(d, d.raw.Count)
}
