package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// InstanceClaim is what Placement holds for one instance on this host.
type InstanceClaim struct {
	Instance string
	// Devices are this host's OTU device RPs the instance holds.
	Devices []Device
	// Compute is the instance's resources on the compute node RP (VCPU,
	// MEMORY_MB, DISK_GB, ...), for the claim record.
	Compute      map[string]int
	ProjectID    string
	UserID       string
	ConsumerType string
}

// InstanceDevices reads GET /allocations/{instance} and keeps only RPs of
// this host's tree carrying the OTU trait (identity from this host's
// Placement tree, never from a notification). 2 calls: the allocations,
// and one listing of the tree with the OTU trait and without the
// quarantine trait, which also proves the traits of the devices it lists
// at the generation the allocations read gave (claimtraits.go). +1 when
// an allocation is on a provider that listing did not show (a quarantined
// OTU device of this host, or another provider): the tree is listed again
// with the OTU trait alone, as the match always did; +1 the first time to
// find the compute node; +1 when nothing of this host matched, to make
// sure the compute node RP was not re-created. Devices carry Ref,
// resource class and Used only: read a device with Device for its full
// state.
func (c *Client) InstanceDevices(ctx context.Context, instance string) (*InstanceClaim, error) {
	if instance == "" || strings.ContainsAny(instance, "/?#") {
		return nil, fmt.Errorf("placement: instance %q is not a consumer UUID", instance)
	}
	node, err := c.nodeRP(ctx)
	if err != nil {
		return nil, err
	}
	var body struct {
		Allocations  map[string]consumerAlloc `json:"allocations"`
		ProjectID    string                   `json:"project_id"`
		UserID       string                   `json:"user_id"`
		ConsumerType string                   `json:"consumer_type"`
	}
	err = c.retry(ctx, func(ctx context.Context) error {
		return c.do(ctx, http.MethodGet, "allocations/"+instance, nil, &body, http.StatusOK)
	}, "instance", instance)
	if err != nil {
		return nil, fmt.Errorf("reading allocations of instance %s: %w", instance, err)
	}
	claim := &InstanceClaim{Instance: instance, ProjectID: body.ProjectID, UserID: body.UserID,
		ConsumerType: body.ConsumerType, Compute: map[string]int{}}
	if len(body.Allocations) == 0 {
		return claim, nil
	}
	// Listed after the allocations read returned, with the quarantine
	// trait forbidden: the devices listed at the generation that read gave
	// have known traits at it (claimtraits.go).
	listed, err := c.listManaged(ctx, node, ",!"+c.cfg.QuarantineTrait)
	if err != nil {
		return nil, err
	}
	c.rememberClaimTraits(listed, body.Allocations)
	matched := matchClaim(claim, node, listed.provs, body.Allocations)
	if unlisted(node, listed, body.Allocations) {
		// An allocation on a provider the filtered listing did not show may
		// be on a quarantined one-time-use device of this host: list as
		// before, with the one-time-use trait alone, so such a device is
		// matched, burned and claimed all the same.
		if listed, err = c.listManaged(ctx, node, ""); err != nil {
			return nil, err
		}
		claim.Devices, claim.Compute = nil, map[string]int{}
		matched = matchClaim(claim, node, listed.provs, body.Allocations)
	}
	if !matched {
		// Nothing of this host's tree: check the cached node is current.
		if node, listed, err = c.relookupNode(ctx, node); err != nil {
			return nil, err
		}
		if listed.via != nil {
			matchClaim(claim, node, listed.provs, body.Allocations)
		}
	}
	sort.Slice(claim.Devices, func(i, j int) bool { return claim.Devices[i].Address < claim.Devices[j].Address })
	return claim, nil
}

type consumerAlloc struct {
	// Generation is the provider's as this read saw it (nil if Placement
	// did not say).
	Generation *int           `json:"generation"`
	Resources  map[string]int `json:"resources"`
}

// unlisted reports an allocation on a provider other than node that
// listed does not show.
func unlisted(node string, listed managed, allocs map[string]consumerAlloc) bool {
	for rp := range allocs {
		if _, ok := listed.via[rp]; !ok && rp != node {
			return true
		}
	}
	return false
}

// matchClaim fills claim from the allocations on node and on devs and
// reports whether anything matched.
func matchClaim(claim *InstanceClaim, node string, devs []provider, allocs map[string]consumerAlloc) bool {
	matched := false
	if a, ok := allocs[node]; ok {
		matched = true
		for rc, n := range a.Resources {
			claim.Compute[rc] = n
		}
	}
	for _, p := range devs {
		a, ok := allocs[p.UUID]
		if !ok {
			continue
		}
		matched = true
		d := Device{Ref: refOf(p)}
		for rc, n := range a.Resources {
			d.Inventory.ResourceClass, d.Used = rc, n
		}
		claim.Devices = append(claim.Devices, d)
	}
	return matched
}

// WithInventories reads the inventory of each of claim's devices, once
// (4 at a time), so that a claim burns only what Nova left unburned: 1
// call per device, where Device costs 3. The inventory read also primes
// the remembered inventories (invCache), so the release's read of an
// unchanged device costs one call. Each device gets its inventory, its
// generation and the state derived with claim's instance as its consumer
// (the instance's allocations name it; a device's single unit has one
// holder). A device whose read fails is left as InstanceDevices gave it
// (inventory unknown, total 0) and its error joined to the result: the
// caller burns it anyway (Burn reads it itself and is idempotent).
func (c *Client) WithInventories(ctx context.Context, claim *InstanceClaim) error {
	errs := make([]error, len(claim.Devices))
	sem := make(chan struct{}, scanConcurrency)
	var wg sync.WaitGroup
	for i := range claim.Devices {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			d := &claim.Devices[i]
			var inv *rawInventory
			err := c.retry(ctx, func(ctx context.Context) error {
				var err error
				inv, err = c.readInventory(ctx, d.UUID)
				return err
			}, d.Ref.logAttrs()...)
			if err != nil {
				errs[i] = devErr("read inventory", d.Ref, err)
				return
			}
			d.Generation, d.Inventory, d.raw = inv.Generation, inv.Inv, inv
			d.Consumers = []string{claim.Instance}
			c.derive(d, inv.Count)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
