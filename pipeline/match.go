package pipeline

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/scour-project/scour/hardware"
)

// Target is what the caller knows about the device to clean. Identity
// comes from this host's Placement tree (RPUUID, ResourceClass) and local
// discovery (the engine calls Backend.Discover), never from a notification.
type Target struct {
	Address       hardware.Address
	RPUUID        string
	RPName        string
	ResourceClass string
	// PreviousInstance and PreviousProject are passed to plugins when known.
	PreviousInstance string
	PreviousProject  string
	// Trigger is what made scour clean the device (the record's
	// triggered_by); "" leaves it to the checkpoint store.
	Trigger string
	// retireReason, on an operator's retirement run (Engine.Retire),
	// says who retired the device and why.
	retireReason string
}

// match returns the first profile that matches, and why each profile before
// it did not (for dry runs and "no profile" reports).
func (c *Config) match(t Target, dev *hardware.Device) (*Profile, []string) {
	var why []string
	for i := range c.Profiles {
		p := &c.Profiles[i]
		if reason := p.Match.mismatch(t, dev); reason != "" {
			why = append(why, fmt.Sprintf("profile %s: %s", p.Name, reason))
			continue
		}
		return p, why
	}
	return nil, why
}

// mismatch returns "" when m matches, else the first criterion that fails.
func (m *Match) mismatch(t Target, dev *hardware.Device) string {
	if len(m.ResourceClasses) > 0 && !slices.Contains(m.ResourceClasses, "*") && !slices.Contains(m.ResourceClasses, t.ResourceClass) {
		return fmt.Sprintf("resource class %q not in %v", t.ResourceClass, m.ResourceClasses)
	}
	if len(m.VendorProduct) > 0 && !slices.ContainsFunc(m.VendorProduct, func(vp string) bool { return vendorProductMatches(vp, dev) }) {
		return fmt.Sprintf("vendor:product %s:%s not in %v", hexID(dev.VendorID), hexID(dev.DeviceID), m.VendorProduct)
	}
	if len(m.PCIClass) > 0 && !slices.ContainsFunc(m.PCIClass, func(pc string) bool { return strings.HasPrefix(hexID(dev.Class), normClass(pc)) }) {
		return fmt.Sprintf("PCI class %s not under %v", dev.Class, m.PCIClass)
	}
	if len(m.Kinds) > 0 && !slices.Contains(m.Kinds, string(dev.Kind)) {
		return fmt.Sprintf("kind %q not in %v", dev.Kind, m.Kinds)
	}
	if len(m.Requires) > 0 {
		req, err := ParseRequirements(m.Requires)
		if err != nil {
			return err.Error()
		}
		if ok, unmet := req.Match(dev.Capabilities); !ok {
			return "requirements unmet: " + strings.Join(unmet, "; ")
		}
	}
	return ""
}

func hexID(s string) string { return strings.TrimPrefix(strings.ToLower(s), "0x") }

func normClass(s string) string {
	s = hexID(strings.TrimSpace(s))
	if s == "" || strings.Trim(s, "0123456789abcdef") != "" {
		return ""
	}
	return s
}

func splitVendorProduct(vp string) (vendor, product string, ok bool) {
	v, p, found := strings.Cut(strings.ToLower(vp), ":")
	v, p = hexID(v), hexID(p)
	isHex := func(s string) bool { return len(s) == 4 && strings.Trim(s, "0123456789abcdef") == "" }
	return v, p, found && isHex(v) && (p == "*" || isHex(p))
}

func vendorProductMatches(vp string, dev *hardware.Device) bool {
	v, p, ok := splitVendorProduct(vp)
	return ok && v == hexID(dev.VendorID) && (p == "*" || p == hexID(dev.DeviceID))
}

func inDirs(path string, dirs []string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	d := filepath.Dir(filepath.Clean(path))
	return slices.ContainsFunc(dirs, func(x string) bool { return filepath.Clean(x) == d })
}
