package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"
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

// PublishCapabilities replaces the device's CUSTOM_SCOUR_CAP_* traits with
// those derived from caps, keeping every other trait. A no-op unless
// Config.PublishCapabilityTraits. Booleans become CUSTOM_SCOUR_CAP_<NAME>,
// set and ordered-set members CUSTOM_SCOUR_CAP_<NAME>_<ITEM>.
func (c *Client) PublishCapabilities(ctx context.Context, dev Ref, caps hardware.Capabilities) error {
	if !c.cfg.PublishCapabilityTraits {
		return nil
	}
	want := CapabilityTraits(caps)
	for _, t := range want {
		if err := c.ensureTrait(ctx, t); err != nil {
			return devErr("publish capabilities", dev, err)
		}
	}
	err := c.editTraits(ctx, dev, func(t []string) []string {
		next := slices.DeleteFunc(slices.Clone(t), func(s string) bool { return strings.HasPrefix(s, CapabilityPrefix) })
		next = append(next, want...)
		if sameSet(next, t) {
			return nil
		}
		return next
	})
	return devErr("publish capabilities", dev, err)
}

// CapabilityTraits maps capabilities to trait names, sorted.
func CapabilityTraits(caps hardware.Capabilities) []string {
	var out []string
	for name, v := range caps {
		base := CapabilityPrefix + traitPart(name)
		switch v.Kind {
		case hardware.KindBool:
			if v.Bool {
				out = append(out, base)
			}
		case hardware.KindSet, hardware.KindOrdered:
			for _, it := range v.Items {
				out = append(out, base+"_"+traitPart(it))
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func traitPart(s string) string {
	b := []byte(strings.ToUpper(s))
	for i, ch := range b {
		if (ch < 'A' || ch > 'Z') && (ch < '0' || ch > '9') {
			b[i] = '_'
		}
	}
	return string(b)
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
	})
}
