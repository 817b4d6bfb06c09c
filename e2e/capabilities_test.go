package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// withCapabilityTraits turns on placement.publish_capability_traits.
func withCapabilityTraits() HostOption {
	return func(cfg map[string]any) {
		cfg["placement"].(map[string]any)["publish_capability_traits"] = true
	}
}

// With publish_capability_traits, scourd puts each local device's
// discovered capabilities on its provider as CUSTOM_SCOUR_CAP_* traits,
// keeping Nova's traits, so flavors can require them.
func TestCapabilityTraitsPublished(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: "0000:81:00.0", SANICAP: 0x7}}, withCapabilityTraits(), WithReconcileInterval(time.Hour))
	d := h.Device("0000:81:00.0")
	Eventually(t, 30*time.Second, "capability traits on "+d.Name, func() (bool, string) {
		traits := c.P.Traits(t, d.UUID)
		var caps []string
		for _, tr := range traits {
			if strings.HasPrefix(tr, "CUSTOM_SCOUR_CAP_") {
				caps = append(caps, tr)
			}
		}
		ok := slices.Contains(caps, "CUSTOM_SCOUR_CAP_NVME_SANITIZE_CRYPTO") &&
			slices.Contains(traits, "COMPUTE_MANAGED_PCI_DEVICE") && slices.Contains(traits, "HW_PCI_ONE_TIME_USE")
		return ok, fmt.Sprintf("traits %v", traits)
	})
}
