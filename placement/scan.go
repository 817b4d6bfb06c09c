package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ScanResult is one host scan.
type ScanResult struct {
	Node     string
	NodeUUID string
	Devices  []Device // sorted by PCI address; unmanaged ones included
	Calls    int      // Placement requests this scan made
}

// scanConcurrency bounds parallel per-device reads (Placement's default
// uwsgi deployment serves a handful of threads per process).
const scanConcurrency = 4

type callCounter struct{}

// withCounter makes every request under ctx also count into n.
func withCounter(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, callCounter{}, n)
}

func countCall(ctx context.Context) {
	if n, ok := ctx.Value(callCounter{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}

type provider struct {
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	ParentUUID string `json:"parent_provider_uuid"`
	RootUUID   string `json:"root_provider_uuid"`
	Generation int    `json:"generation"`
}

// Scan reads every OTU device of this host. Calls: 1 list of the tree with
// the OTU trait, 1 list with OTU+quarantine traits, then per device 2
// (inventories, allocations), or 1 (allocations) when the device is still
// at the generation its inventory was last read at (readPair); plus 1 the
// first time to find the compute node by name. Devices are read in
// parallel (4 at a time).
func (c *Client) Scan(ctx context.Context) (*ScanResult, error) {
	start := time.Now()
	defer func() { c.metrics.scanSeconds.Observe(time.Since(start).Seconds()) }()
	var n atomic.Int64
	ctx = withCounter(ctx, &n)
	node, err := c.nodeRP(ctx)
	if err != nil {
		return nil, err
	}
	listed, err := c.listManaged(ctx, node, "")
	if err != nil {
		return nil, err
	}
	devs := listed.provs
	if len(devs) == 0 {
		// An unknown in_tree UUID lists nothing rather than failing: make
		// sure the cached compute node RP was not deleted and re-created.
		var relisted managed
		if node, relisted, err = c.relookupNode(ctx, node); err != nil {
			return nil, err
		}
		if relisted.via != nil {
			listed, devs = relisted, relisted.provs
		}
	}
	inTree := make(map[string]bool, len(devs))
	for _, p := range devs {
		inTree[p.UUID] = true
	}
	c.invs.keepOnly(inTree) // devices gone from the tree
	c.traitsAt.keepOnly(inTree)
	quarantined, err := c.listManaged(ctx, node, ","+c.cfg.QuarantineTrait)
	if err != nil {
		return nil, err
	}
	q := make(map[string]bool, len(quarantined.provs))
	for _, p := range quarantined.provs {
		q[p.UUID] = true
	}
	out := make([]Device, len(devs))
	errs := make([]error, len(devs))
	sem := make(chan struct{}, scanConcurrency)
	var wg sync.WaitGroup
	for i, p := range devs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = c.readDevice(ctx, p, q[p.UUID])
			if errs[i] == nil && !listed.sure(p.UUID, quarantined) {
				// Its quarantine listing failed: whether it is quarantined is
				// unknown, so it is left alone this scan (never cleaned,
				// returned or counted free).
				out[i].State, out[i].Why = StateUnmanaged, "Cyborg device whose quarantine listing failed this scan (see the WARN on the failed Cyborg listing); left alone until it works again"
			}
		}()
	}
	wg.Wait()
	kept := out[:0]
	for i, err := range errs {
		switch {
		case errors.Is(err, ErrNotFound):
			// Deleted between the list and the read (device removed from
			// the device_spec): it is no longer this host's device.
			c.log.Warn("device disappeared during the scan", "device", out[i].Name, "rp", out[i].UUID)
			continue
		case err != nil:
			return nil, fmt.Errorf("host scan of %s: %w", c.cfg.Node, devErr("read", out[i].Ref, err))
		case out[i].State == StateUnmanaged:
			c.log.Warn("skipping device scour does not manage", "device", out[i].Name, "rp", out[i].UUID, "why", out[i].Why)
		}
		kept = append(kept, out[i])
	}
	out = kept
	sort.Slice(out, func(i, j int) bool {
		if out[i].Address != out[j].Address {
			return out[i].Address < out[j].Address
		}
		return out[i].Name < out[j].Name
	})
	c.metrics.scanRequests.Set(float64(n.Load()))
	return &ScanResult{Node: c.cfg.Node, NodeUUID: node, Devices: out, Calls: int(n.Load())}, nil
}

// readDevice does the two per-device reads and derives the state.
func (c *Client) readDevice(ctx context.Context, p provider, quarantined bool) (Device, error) {
	d := Device{Ref: refOf(p), Quarantined: quarantined}
	var inv *rawInventory
	err := c.retry(ctx, func(ctx context.Context) error {
		var alloc allocations
		var err error
		inv, alloc, err = c.readPair(ctx, p.UUID)
		if err != nil {
			return err
		}
		gen := alloc.Generation
		used, who := alloc.usage(inv.Inv.ResourceClass)
		if gen != inv.Generation {
			// Changed between the two reads: read both again so state is
			// derived from one consistent generation.
			return errChanged
		}
		d.Generation, d.Used, d.Consumers = gen, used, who
		return nil
	}, d.Ref.logAttrs()...)
	if err != nil {
		return d, err
	}
	d.Inventory, d.raw = inv.Inv, inv
	sort.Strings(d.Consumers)
	c.derive(&d, inv.Count)
	return d, nil
}

// readPair reads an RP's allocations and its inventory. When an earlier
// inventory read is remembered, the allocations are read alone, and the
// remembered inventory stands in for a second read if the allocations
// come back at its generation (one call). Otherwise the inventory is read
// too: both at once when nothing is remembered, after the allocations
// when the remembered one turned out stale. The caller compares the two
// generations.
func (c *Client) readPair(ctx context.Context, uuid string) (*rawInventory, allocations, error) {
	known := c.invs.get(uuid)
	if known == nil {
		return c.readBoth(ctx, uuid)
	}
	alloc, err := c.allocationsOf(ctx, uuid)
	if err != nil {
		return nil, alloc, err
	}
	if alloc.Generation == known.Generation {
		return known, alloc, nil
	}
	inv, err := c.readInventory(ctx, uuid)
	return inv, alloc, err
}

// readBoth reads an RP's inventories and allocations with both requests
// in flight at once: a device read costs one round trip, and devices read
// together (a release, a scan) finish in about the order they were asked
// for, so the first can start cleaning while the others are still read.
func (c *Client) readBoth(ctx context.Context, uuid string) (*rawInventory, allocations, error) {
	var alloc allocations
	var allocErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		alloc, allocErr = c.allocationsOf(ctx, uuid)
	}()
	inv, err := c.readInventory(ctx, uuid)
	<-done
	if err != nil {
		return nil, alloc, err
	}
	return inv, alloc, allocErr
}

func refOf(p provider) Ref {
	r := Ref{UUID: p.UUID, Name: p.Name}
	if a, err := parseAddress(p.Name); err == nil {
		r.Address = a
	}
	return r
}

// nodeRP finds (once) the compute node RP named Config.Node.
func (c *Client) nodeRP(ctx context.Context) (string, error) {
	c.mu.Lock()
	id := c.nodeUUID
	c.mu.Unlock()
	if id != "" {
		return id, nil
	}
	var body struct {
		Providers []provider `json:"resource_providers"`
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		return c.do(ctx, http.MethodGet, "resource_providers?name="+url.QueryEscape(c.cfg.Node), nil, &body, http.StatusOK)
	})
	if err != nil {
		return "", fmt.Errorf("finding compute node %q in Placement: %w", c.cfg.Node, err)
	}
	if len(body.Providers) != 1 {
		return "", fmt.Errorf("compute node %q: %w (found %d providers with that name; set placement.node to Nova's nodename for this host)",
			c.cfg.Node, ErrNotFound, len(body.Providers))
	}
	c.mu.Lock()
	c.nodeUUID = body.Providers[0].UUID
	c.mu.Unlock()
	return body.Providers[0].UUID, nil
}

// relookupNode finds the compute node by name again and, if its UUID
// changed, lists the new tree.
func (c *Client) relookupNode(ctx context.Context, old string) (string, managed, error) {
	c.mu.Lock()
	c.nodeUUID = ""
	c.mu.Unlock()
	node, err := c.nodeRP(ctx)
	if err != nil || node == old {
		return node, managed{}, err
	}
	c.log.Warn("compute node resource provider was re-created", "old", old, "new", node)
	devs, err := c.listManaged(ctx, node, "")
	return node, devs, err
}

// listTree lists the providers in the node's tree having all traits
// (comma-separated).
func (c *Client) listTree(ctx context.Context, node, traits string) ([]provider, error) {
	var body struct {
		Providers []provider `json:"resource_providers"`
	}
	q := url.Values{"in_tree": {node}, "required": {traits}}
	err := c.withTraits(ctx, func(ctx context.Context) error {
		return c.retry(ctx, func(ctx context.Context) error {
			return c.do(ctx, http.MethodGet, "resource_providers?"+q.Encode(), nil, &body, http.StatusOK)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s's devices with trait(s) %s: %w", c.cfg.Node, traits, err)
	}
	var out []provider
	for _, p := range body.Providers {
		if p.UUID != node {
			out = append(out, p)
		}
	}
	return out, nil
}
