package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// withCapabilityTraits sets placement.publish_capability_traits, which
// older scourd versions obeyed by writing the traits hourly.
func withCapabilityTraits() HostOption {
	return func(cfg map[string]any) {
		cfg["placement"].(map[string]any)["publish_capability_traits"] = true
	}
}

// Capability traits reach Placement through Nova's [pci] device_spec,
// the only custom traits Nova keeps on its device providers: scourctl
// nova-device-spec prints the entry from scour's discovery, and after
// Nova's update (which sets the provider's traits to exactly its own set)
// the flavor-required capability traits are there. scourd writes no trait
// of its own beside them (publish_capability_traits is ignored, with a
// WARN), so the next Nova update removes nothing.
func TestCapabilityTraitsThroughNovaDeviceSpec(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addr, SANICAP: 0x7}}, withCapabilityTraits(), WithReconcileInterval(time.Second))
	d := h.Device(addr)

	out, err := exec.Command(filepath.Join(bins, "scourctl"), "nova-device-spec", "--config", h.config, addr).Output()
	if err != nil {
		t.Fatalf("scourctl nova-device-spec: %v\n%s", err, out)
	}
	spec := deviceSpecEntry(t, string(out), addr)
	if spec["one_time_use"] != true || spec["vendor_id"] != "144d" || spec["product_id"] != "a80a" {
		t.Errorf("entry %v: want one_time_use true, vendor_id 144d, product_id a80a", spec)
	}
	traitsTag, _ := spec["traits"].(string)
	d.Traits = strings.Split(traitsTag, ",") // nova.conf edited, nova-compute restarted
	c.P.NovaUpdateTraits(t, d)

	want := append([]string{harness.TraitManagedPCIDevice, harness.TraitOneTimeUse, harness.TraitOwnerNova}, d.Traits...)
	slices.Sort(want)
	has := func() (bool, string) {
		got := c.P.Traits(t, d.UUID)
		slices.Sort(got)
		return slices.Equal(got, want), fmt.Sprintf("traits %v, want %v", got, want)
	}
	if ok, why := has(); !ok {
		t.Fatal(why)
	}
	for _, tr := range []string{"CUSTOM_SCOUR_CAP_NVME_SANITIZE_CRYPTO", "CUSTOM_SCOUR_CAP_KIND_NVME"} {
		if !slices.Contains(d.Traits, tr) {
			t.Errorf("device_spec traits %v lack %s, which a flavor may require", d.Traits, tr)
		}
	}
	// Several scans, and Nova's next update: nothing changes.
	Never(t, 4*time.Second, "scourd changes the device's traits", func() (bool, string) {
		ok, why := has()
		return !ok, why
	})
	c.P.NovaUpdateTraits(t, d)
	if ok, why := has(); !ok {
		t.Error(why)
	}
	if !strings.Contains(h.Logs(), "publish_capability_traits is ignored") {
		t.Error("no WARN that placement.publish_capability_traits is ignored")
	}
}

// deviceSpecEntry parses the `device_spec = {...}` line for addr.
func deviceSpecEntry(t *testing.T, out, addr string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		js, ok := strings.CutPrefix(line, "device_spec = ")
		if !ok {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(js), &v); err != nil {
			t.Fatalf("device_spec entry is not JSON: %v: %s", err, line)
		}
		if v["address"] == addr {
			return v
		}
	}
	t.Fatalf("no device_spec entry for %s in:\n%s", addr, out)
	return nil
}
