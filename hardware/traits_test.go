package hardware

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTraitsOnlyFlagsFixedSetsAndBuckets(t *testing.T) {
	t.Parallel()
	caps := Capabilities{
		"kind":                    Set("nvme"),
		"pci.reset":               Bool(true),
		"pci.sriov":               Bool(false),
		"pci.driver":              Set("vfio-pci"),
		"pci.vendor":              Set("0x144d"),
		"nvme.sanitize":           Ordered("block", "crypto"),
		"nvme.percent_used":       Ordered("7"),
		"nvme.firmware":           Ordered("GDC5302Q"),
		"nvme.model":              Set("PM9A3"),
		"nvme.block_device":       Bool(true),
		"gpu.memory_mib":          Ordered("81920"),
		"gpu.driver_version":      Ordered("550.54.15"),
		"nic.firmware.fw.version": Ordered("22.31.1014"),
		"custom.rack_cooled":      Bool(true),
		"custom.zones":            Set("a", "b"),
		"custom.bios":             Ordered("2.1"),
		"made.up":                 Bool(true),
	}
	want := []string{
		"P_CUSTOM_RACK_COOLED",
		"P_CUSTOM_ZONES_A", "P_CUSTOM_ZONES_B",
		"P_KIND_NVME",
		"P_NVME_PERCENT_USED_BELOW_10", "P_NVME_PERCENT_USED_BELOW_100", "P_NVME_PERCENT_USED_BELOW_25",
		"P_NVME_PERCENT_USED_BELOW_50", "P_NVME_PERCENT_USED_BELOW_75", "P_NVME_PERCENT_USED_BELOW_90",
		"P_NVME_SANITIZE_BLOCK", "P_NVME_SANITIZE_CRYPTO",
		"P_PCI_RESET",
	}
	if diff := cmp.Diff(want, caps.Traits("P_")); diff != "" {
		t.Errorf("traits (-want +got):\n%s", diff)
	}
}

// Wear moves across bucket boundaries: the trait set changes only at a
// boundary, and stays within len(PercentUsedBounds) names whatever the
// value, so traits do not multiply as the counter grows.
func TestPercentUsedBuckets(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, tc := range []struct {
		used string
		want int
	}{{"0", 6}, {"9", 6}, {"10", 5}, {"49", 4}, {"50", 3}, {"89", 2}, {"99", 1}, {"100", 0}, {"255", 0}, {"x", 0}} {
		got := Capabilities{"nvme.percent_used": Ordered(tc.used)}.Traits("P_")
		if len(got) != tc.want {
			t.Errorf("percent_used %s: %d traits %v, want %d", tc.used, len(got), got, tc.want)
		}
		for _, g := range got {
			seen[g] = true
		}
	}
	if len(seen) != len(PercentUsedBounds) {
		t.Errorf("distinct traits %d, want %d: %v", len(seen), len(PercentUsedBounds), seen)
	}
}

// Every known capability has a deliberate rule, and no free-valued one
// (a set without a fixed member list, a version) is published.
func TestTraitRulesAreBounded(t *testing.T) {
	t.Parallel()
	for _, s := range KnownCapabilities() {
		switch s.Trait.Shape {
		case TraitFlag:
			if s.Kind != KindBool {
				t.Errorf("%s: flag rule on a %s", s.Name, s.Kind)
			}
		case TraitMembers:
			if len(s.Trait.Members) == 0 || len(s.Trait.Members) > 8 {
				t.Errorf("%s: members %v not a small fixed set", s.Name, s.Trait.Members)
			}
		case TraitBelow:
			if len(s.Trait.Bounds) == 0 || len(s.Trait.Bounds) > 8 {
				t.Errorf("%s: bounds %v", s.Name, s.Trait.Bounds)
			}
		case TraitOperator:
			if !strings.HasPrefix(s.Name, CustomPrefix) {
				t.Errorf("%s: operator rule outside custom.*", s.Name)
			}
		}
	}
}

// Static traits are those a device_spec can carry for good: the wear
// buckets and the health flags, which change during the device's life,
// are left out; everything else is as Traits renders it.
func TestStaticTraitsLeaveOutChangingCapabilities(t *testing.T) {
	t.Parallel()
	caps := Capabilities{
		"kind":                  Set("nvme"),
		"pci.reset":             Bool(true),
		"nvme.sanitize":         Ordered("crypto"),
		"nvme.percent_used":     Ordered("7"),
		"nvme.critical_warning": Bool(true),
		"nvme.spare_ok":         Bool(true),
		"custom.rack_cooled":    Bool(true),
	}
	want := []string{"P_CUSTOM_RACK_COOLED", "P_KIND_NVME", "P_NVME_SANITIZE_CRYPTO", "P_PCI_RESET"}
	if diff := cmp.Diff(want, caps.StaticTraits("P_")); diff != "" {
		t.Errorf("static traits (-want +got):\n%s", diff)
	}
	if all := caps.Traits("P_"); len(all) != len(want)+8 { // 6 wear buckets, 2 health flags
		t.Errorf("Traits: %d names %v, want %d", len(all), all, len(want)+8)
	}
}
