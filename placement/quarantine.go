package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/scour-project/scour/hardware"
)

// Quarantine keeps a device out of the pool until an operator acts: it
// makes sure reserved=total, then adds the quarantine trait. Placement has
// no place for the reason, so it is logged here and belongs in scour's own
// record. Idempotent.
func (c *Client) Quarantine(ctx context.Context, dev Ref, reason string) error {
	if err := checkRef(dev); err != nil {
		return devErr("quarantine", dev, err)
	}
	if err := c.reserveAll(ctx, dev); err != nil {
		return devErr("quarantine", dev, err)
	}
	err := c.editTraits(ctx, dev, func(t []string) []string {
		if slices.Contains(t, c.cfg.QuarantineTrait) {
			return nil
		}
		return append(t, c.cfg.QuarantineTrait)
	})
	if err != nil {
		return devErr("quarantine", dev, err)
	}
	c.log.Warn("device quarantined", "device", dev.Name, "rp", dev.UUID, "address", dev.Address, "reason", reason)
	return nil
}

// Unquarantine removes the quarantine trait: an explicit operator action.
// The device stays reserved (dirty), so scour cleans it again before it
// can return to the pool.
func (c *Client) Unquarantine(ctx context.Context, dev Ref) error {
	err := c.editTraits(ctx, dev, func(t []string) []string {
		if !slices.Contains(t, c.cfg.QuarantineTrait) {
			return nil
		}
		return slices.DeleteFunc(t, func(s string) bool { return s == c.cfg.QuarantineTrait })
	})
	if err != nil {
		return devErr("unquarantine", dev, err)
	}
	c.log.Info("device unquarantined", "device", dev.Name, "rp", dev.UUID)
	return nil
}

// CapabilityPrefix starts every capability trait scour publishes.
const CapabilityPrefix = "CUSTOM_SCOUR_CAP_"

// legacyCapabilityPrefixes start the capability traits older scour
// versions published (CUSTOM_SCOUR_<FAMILY>_..., before the CAP_ prefix,
// with free values such as driver names and firmware versions): they are
// removed as stale wherever scour publishes or withdraws.
var legacyCapabilityPrefixes = []string{
	"CUSTOM_SCOUR_KIND_", "CUSTOM_SCOUR_PCI_", "CUSTOM_SCOUR_NVME_",
	"CUSTOM_SCOUR_GPU_", "CUSTOM_SCOUR_NIC_", "CUSTOM_SCOUR_CUSTOM_",
}

// PublishCapabilities replaces the device's scour capability traits with
// CapabilityTraits(caps), keeping every other trait (Nova's, the
// operator's, the quarantine trait). Stale ones go: a trait scour
// published before that no longer applies, including older versions'
// names. With Config.PublishCapabilityTraits off, caps is ignored and
// the device's scour capability traits are withdrawn. One GET, plus one
// PUT only when something changes.
func (c *Client) PublishCapabilities(ctx context.Context, dev Ref, caps hardware.Capabilities) error {
	var want []string
	if c.cfg.PublishCapabilityTraits {
		want = CapabilityTraits(caps)
	}
	for _, t := range want {
		if err := c.ensureTrait(ctx, t); err != nil {
			return devErr("publish capabilities", dev, err)
		}
	}
	err := c.editTraits(ctx, dev, func(t []string) []string {
		next := slices.DeleteFunc(slices.Clone(t), c.isCapabilityTrait)
		next = append(next, want...)
		if sameSet(next, t) {
			return nil
		}
		return next
	})
	return devErr("publish capabilities", dev, err)
}

// isCapabilityTrait reports whether t is a capability trait of this or
// an older scour version (never the configured quarantine trait).
func (c *Client) isCapabilityTrait(t string) bool {
	if t == c.cfg.QuarantineTrait {
		return false
	}
	if strings.HasPrefix(t, CapabilityPrefix) {
		return true
	}
	return slices.ContainsFunc(legacyCapabilityPrefixes, func(p string) bool { return strings.HasPrefix(t, p) })
}

// CapabilityTraits maps capabilities to trait names by each capability's
// hardware.TraitRule (booleans, fixed sets, bucketed numbers; never free
// values), sorted. docs/placement.md lists them.
func CapabilityTraits(caps hardware.Capabilities) []string {
	return caps.Traits(CapabilityPrefix)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// editTraits applies edit to the RP's current traits and PUTs the result
// at the generation read, retrying on conflicts. edit returns nil when
// nothing needs to change. Only scour's own traits are ever added or
// removed; everything else read is sent back.
func (c *Client) editTraits(ctx context.Context, dev Ref, edit func([]string) []string) error {
	if err := checkRef(dev); err != nil {
		return err
	}
	if err := c.ensureTrait(ctx, c.cfg.QuarantineTrait); err != nil {
		return err
	}
	return c.withTraits(ctx, func(ctx context.Context) error {
		return c.retry(ctx, func(ctx context.Context) error {
			gen, traits, err := c.traitsOf(ctx, dev.UUID)
			if err != nil {
				return err
			}
			next := edit(slices.Clone(traits))
			if next == nil {
				return nil
			}
			if err := c.putTraits(ctx, dev.UUID, gen, next); err != nil {
				return fmt.Errorf("updating traits: %w", err)
			}
			return nil
		}, dev.logAttrs()...)
	})
}
