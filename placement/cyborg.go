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

// managed is one listing of the devices scour manages (listManaged).
type managed struct {
	provs []provider
	// via names, per provider, the Cyborg traits it was listed under
	// ("" for the one-time-use trait).
	via map[string][]string
	// failed holds the Cyborg traits whose listing failed this time (the
	// previous successful listing stood in, or nothing).
	failed map[string]bool
}

// sure says whether uuid's presence in a listing with extra traits is
// known: it was listed (in the plain listing m) under the one-time-use
// trait or a Cyborg trait whose listing with extra (x) did not fail.
func (m managed) sure(uuid string, x managed) bool {
	return slices.ContainsFunc(m.via[uuid], func(t string) bool { return t == "" || !x.failed[t] })
}

// listManaged lists the providers of node's tree that scour manages and
// that carry every trait of extra (a comma-separated suffix such as
// ",CUSTOM_SCOUR_QUARANTINED", or ""): those with the one-time-use trait,
// and with Cyborg recognition on, those with any Cyborg trait (one more
// listing per trait; before microversion 1.39 Placement cannot list
// "any of"). Cyborg providers are remembered as such (isCyborg).
//
// Only the one-time-use listing failing fails the call: a Cyborg listing
// that fails (a trait an older Placement does not know and scour cannot
// create, being a standard one; Placement failing past the retries) is
// logged and counted (cyborgListFailed), its previous successful listing
// stands in, and it is named in failed; Nova's one-time-use devices are
// burned, cleaned and returned as ever.
func (c *Client) listManaged(ctx context.Context, node, extra string) (managed, error) {
	out, err := c.listTree(ctx, node, c.cfg.OneTimeUseTrait+extra)
	m := managed{provs: out, via: make(map[string][]string, len(out)), failed: map[string]bool{}}
	for _, p := range out {
		m.via[p.UUID] = []string{""}
	}
	if err != nil || !c.cfg.Cyborg.Enabled {
		return m, err
	}
	for _, t := range c.cfg.Cyborg.Traits {
		key := node + "?" + t + extra
		ps, err := c.listTree(ctx, node, t+extra)
		if err != nil {
			m.failed[t] = true
			ps = c.cyborgListFailed(key, t+extra, err)
		} else {
			c.cyborgListed(key, t+extra, ps)
		}
		for _, p := range ps {
			c.noteCyborg(p.UUID)
			if _, ok := m.via[p.UUID]; !ok {
				m.provs = append(m.provs, p)
			}
			m.via[p.UUID] = append(m.via[p.UUID], t)
		}
	}
	return m, nil
}

// cyborgListFailed counts a failed Cyborg listing, logs it at WARN when
// its error differs from the one last logged for the same listing (a
// Placement that does not know the trait fails every scan the same way),
// and returns the listing's previous successful result (nil if none).
func (c *Client) cyborgListFailed(key, traits string, err error) []provider {
	c.metrics.cyborgListFailures.WithLabelValues(traits).Inc()
	c.mu.Lock()
	prev, had := c.cyborgLists[key]
	logIt := c.cyborgListErr[key] != err.Error()
	if c.cyborgListErr == nil {
		c.cyborgListErr = map[string]string{}
	}
	c.cyborgListErr[key] = err.Error()
	c.mu.Unlock()
	if logIt {
		c.log.Warn("listing this host's Cyborg devices failed; the one-time-use devices are handled as ever, the Cyborg devices of this listing as of its last success (left alone where their quarantine is unknown), until it works again (check that Placement knows the trait, or set placement.cyborg.traits)",
			"traits", traits, "previous_listing", had, "previous_devices", len(prev), "error", err)
	}
	return slices.Clone(prev)
}

// cyborgListed remembers a successful Cyborg listing.
func (c *Client) cyborgListed(key, traits string, ps []provider) {
	c.mu.Lock()
	if c.cyborgLists == nil {
		c.cyborgLists = map[string][]provider{}
	}
	c.cyborgLists[key] = slices.Clone(ps)
	_, failed := c.cyborgListErr[key]
	delete(c.cyborgListErr, key)
	c.mu.Unlock()
	if failed {
		c.log.Info("listing this host's Cyborg devices works again", "traits", traits, "devices", len(ps))
	}
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
