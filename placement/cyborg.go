package placement

import (
	"context"
	"fmt"
	"net/url"
	"slices"
)

// CyborgConfig says which providers of this host's tree are accelerators
// Cyborg reports (docs/cyborg.md). Cyborg's conductor creates one
// provider per deployable under the compute node, named after the
// deployable and carrying the deployable's traits (OWNER_CYBORG for the
// GPU and PCI drivers, the driver's own CUSTOM_ traits otherwise), with
// one inventory of the deployable's resource class, total = max_unit =
// num_accelerators.
//
// Scour fences such a provider whole (reserved = total) as soon as any of
// its units is allocated, cleans it once no unit is allocated, and then
// returns every unit at once (reserved 0): its units share one card.
type CyborgConfig struct {
	// Enabled turns recognition on (default false).
	Enabled bool `yaml:"enabled"`
	// Traits: a provider of this host's tree carrying any of them is a
	// Cyborg device (default [OWNER_CYBORG]).
	Traits []string `yaml:"traits"`
	// ResourceClasses: the resource classes scour manages on those
	// providers; a Cyborg provider of another class is reported as
	// unmanaged and left alone (default FPGA, PGPU).
	ResourceClasses []string `yaml:"resource_classes"`
	// ReadARQs reads each bound instance's accelerator requests from
	// Cyborg's API to record which card and attach handle it got
	// (default true when Enabled; the cyborg package).
	ReadARQs *bool `yaml:"read_arqs"`
	// Endpoint is Cyborg's API URL as the catalog lists it (".../v2");
	// "" reads the catalog (service type accelerator), which a static
	// placement.token cannot.
	Endpoint string `yaml:"endpoint"`
}

// ARQs says whether Cyborg's ARQs are read (Enabled and ReadARQs).
func (c CyborgConfig) ARQs() bool { return c.Enabled && (c.ReadARQs == nil || *c.ReadARQs) }

var (
	defaultCyborgTraits = []string{"OWNER_CYBORG"}
	defaultCyborgRCs    = []string{"FPGA", "PGPU"}
)

func (c *CyborgConfig) setDefaults() {
	if len(c.Traits) == 0 {
		c.Traits = slices.Clone(defaultCyborgTraits)
	}
	if len(c.ResourceClasses) == 0 {
		c.ResourceClasses = slices.Clone(defaultCyborgRCs)
	}
}

func (c *CyborgConfig) validate(otu, quarantine string, bad func(string, ...any)) {
	if !c.Enabled {
		return
	}
	for _, t := range c.Traits {
		switch {
		case !traitRE.MatchString(t):
			bad("placement.cyborg.traits: %q is not a trait name (A-Z, 0-9, _)", t)
		case t == otu || t == quarantine:
			bad("placement.cyborg.traits: %q is scour's one-time-use or quarantine trait; name the traits Cyborg's drivers set (OWNER_CYBORG, CUSTOM_FAKE_DEVICE, ...)", t)
		}
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("placement.cyborg.endpoint: %q is not an http(s) URL", c.Endpoint)
		}
	}
	for _, rc := range c.ResourceClasses {
		if !traitRE.MatchString(rc) {
			bad("placement.cyborg.resource_classes: %q is not a resource class name (A-Z, 0-9, _)", rc)
		}
	}
}

// listManaged lists the providers of node's tree that scour manages and
// that carry every trait of extra (a comma-separated suffix such as
// ",CUSTOM_SCOUR_QUARANTINED", or ""): those with the one-time-use trait,
// and with Cyborg recognition on, those with any Cyborg trait (one more
// listing per trait; before microversion 1.39 Placement cannot list
// "any of"). Cyborg providers are remembered as such (isCyborg).
func (c *Client) listManaged(ctx context.Context, node, extra string) ([]provider, error) {
	out, err := c.listTree(ctx, node, c.cfg.OneTimeUseTrait+extra)
	if err != nil || !c.cfg.Cyborg.Enabled {
		return out, err
	}
	seen := make(map[string]bool, len(out))
	for _, p := range out {
		seen[p.UUID] = true
	}
	for _, t := range c.cfg.Cyborg.Traits {
		ps, err := c.listTree(ctx, node, t+extra)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			c.noteCyborg(p.UUID)
			if !seen[p.UUID] {
				seen[p.UUID] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

func (c *Client) noteCyborg(uuid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cyborg == nil {
		c.cyborg = map[string]bool{}
	}
	c.cyborg[uuid] = true
}

// isCyborg says whether a listing found uuid carrying a Cyborg trait.
// A restarted scourd knows after its first scan; until then a Cyborg
// device read alone is unmanaged (left alone), never returned.
func (c *Client) isCyborg(uuid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cyborg[uuid]
}

// cyborgShape says whether inv is the shape scour manages on a Cyborg
// device: one inventory of a configured resource class, any total.
func (c *Client) cyborgShape(uuid string, inv *rawInventory) bool {
	return c.cfg.Cyborg.Enabled && c.isCyborg(uuid) && inv.Count == 1 &&
		slices.Contains(c.cfg.Cyborg.ResourceClasses, inv.Inv.ResourceClass)
}

// managedShape checks the inventory shape scour writes: exactly one
// inventory of total 1, or a Cyborg device (cyborgShape).
func (c *Client) managedShape(uuid string, inv *rawInventory) error {
	if inv.Count == 1 && (inv.Inv.Total == 1 || c.cyborgShape(uuid, inv)) {
		return nil
	}
	return fmt.Errorf("%w: %d inventories, total %d", ErrUnmanaged, inv.Count, inv.Inv.Total)
}

// managedTraits says whether traits mark a device scour returns to the
// pool: the one-time-use trait, or (recognition on) a Cyborg trait.
func (c *Client) managedTraits(traits []string) bool {
	if slices.Contains(traits, c.cfg.OneTimeUseTrait) {
		return true
	}
	if !c.cfg.Cyborg.Enabled {
		return false
	}
	return slices.ContainsFunc(traits, func(t string) bool { return slices.Contains(c.cfg.Cyborg.Traits, t) })
}

// returnTo is the reserved value an un-reserve writes: one unit less on a
// one-time-use device (total 1), every unit at once on a Cyborg device,
// which scour fenced whole.
func (c *Client) returnTo(uuid string, inv *rawInventory) int {
	if c.cyborgShape(uuid, inv) {
		return 0
	}
	return max(inv.Inv.Reserved-1, 0)
}

// derive sets d.Cyborg and applies the state table.
func (c *Client) derive(d *Device, invCount int) {
	d.Cyborg = c.isCyborg(d.UUID)
	if d.Cyborg && !slices.Contains(c.cfg.Cyborg.ResourceClasses, d.Inventory.ResourceClass) {
		d.State, d.Why = StateUnmanaged, fmt.Sprintf("Cyborg device of resource class %s, not in placement.cyborg.resource_classes", d.Inventory.ResourceClass)
		return
	}
	deriveState(d, invCount)
}

// Refence sets reserved=total again on a device scour fenced whose fence
// someone lifted (Cyborg's device enable, the conductor's inventory
// rewrite) while it still holds a tenant's data. Raising reserved only
// ever keeps a device out of the pool, so it is written whatever the
// allocations, at the generation read (a conflict re-reads). Every other
// inventory field is sent back exactly as read. Idempotent.
func (c *Client) Refence(ctx context.Context, dev Ref) error {
	return c.raiseToTotal(ctx, dev, "re-fence", nil)
}
