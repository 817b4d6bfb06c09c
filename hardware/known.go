package hardware

import (
	"sort"
	"strings"
)

// Capability names are "<family>.<facet>": family is pci, nvme, gpu, nic or fpga
// (plus the bare name "kind"), facet names the fact. Operator-declared
// capabilities that scour does not discover use the CustomPrefix.
// docs/hardware.md lists every name; KnownCapabilities is its source.

// CustomPrefix starts operator-defined capability names ("custom.rack").
const CustomPrefix = "custom."

// NICFirmwarePrefix starts the per-component NIC firmware versions
// ("nic.firmware.fw.version"), one per devlink "running" version.
const NICFirmwarePrefix = "nic.firmware."

// SanitizeScale orders NVMe sanitize methods from the least to the most
// thorough; nvme.sanitize values and requirements use it.
var SanitizeScale = []string{string(SanitizeOverwrite), string(SanitizeBlock), string(SanitizeCrypto)}

// CapabilitySpec describes one capability name.
type CapabilitySpec struct {
	Name string
	Kind ValueKind
	// Scale orders the values of an ordered capability; nil means
	// values compare as versions (numeric per dot-separated component).
	Scale []string
	// Source says where the value comes from, for docs and scourctl.
	Source string
	// Prefix marks a family of names (Name ends with ".").
	Prefix bool
	// Trait says whether and how the capability is published as
	// Placement traits (docs/placement.md); the zero value is never.
	Trait TraitRule
}

// flag publishes a true bool as one trait; changingFlag one that changes
// during the device's life.
var (
	flag         = TraitRule{Shape: TraitFlag}
	changingFlag = TraitRule{Shape: TraitFlag, Changes: true}
)

var knownCapabilities = []CapabilitySpec{
	{Name: "kind", Kind: KindSet, Source: "PCI class code: nvme, gpu, nic, fpga (0x12 processing accelerator) or generic", Trait: TraitRule{Shape: TraitMembers, Members: DeviceKinds}},
	{Name: "pci.vendor", Kind: KindSet, Source: "sysfs vendor (\"0x144d\")"},
	{Name: "pci.device", Kind: KindSet, Source: "sysfs device (\"0xa80a\")"},
	{Name: "pci.class", Kind: KindSet, Source: "sysfs class (\"0x010802\")"},
	{Name: "pci.driver", Kind: KindSet, Source: "sysfs driver symlink (bound driver); absent when unbound"},
	{Name: "pci.reset", Kind: KindBool, Source: "sysfs reset file present (function-level reset possible)", Trait: flag},
	{Name: "pci.iommu", Kind: KindBool, Source: "sysfs iommu_group symlink present", Trait: flag},
	{Name: "pci.sriov", Kind: KindBool, Source: "sysfs sriov_totalvfs > 0", Trait: flag},
	{Name: "pci.numa_node", Kind: KindSet, Source: "sysfs numa_node (absent when -1)"},
	{Name: "nvme.block_device", Kind: KindBool, Source: "bound to nvme with at least one namespace block device"},
	{Name: "nvme.format", Kind: KindBool, Source: "nvme id-ctrl oacs bit 1 (Format NVM)", Trait: flag},
	{Name: "nvme.crypto_format", Kind: KindBool, Source: "nvme id-ctrl fna bit 2 (crypto erase by format)", Trait: flag},
	{Name: "nvme.sanitize", Kind: KindOrdered, Scale: SanitizeScale, Source: "nvme id-ctrl sanicap bits 2/1/0 (overwrite/block/crypto)", Trait: TraitRule{Shape: TraitMembers, Members: SanitizeScale}},
	{Name: "nvme.firmware", Kind: KindOrdered, Source: "nvme id-ctrl fr (firmware revision)"},
	{Name: "nvme.model", Kind: KindSet, Source: "nvme id-ctrl mn"},
	{Name: "nvme.percent_used", Kind: KindOrdered, Source: "nvme smart-log percent_used (compare numerically: \"<90\")", Trait: TraitRule{Shape: TraitBelow, Bounds: PercentUsedBounds, Changes: true}},
	{Name: "nvme.critical_warning", Kind: KindBool, Source: "nvme smart-log critical_warning != 0", Trait: changingFlag},
	{Name: "nvme.spare_ok", Kind: KindBool, Source: "nvme smart-log avail_spare >= spare_thresh", Trait: changingFlag},
	{Name: "gpu.model", Kind: KindSet, Source: "nvidia-smi name"},
	{Name: "gpu.memory_mib", Kind: KindOrdered, Source: "nvidia-smi memory.total (MiB, compare numerically)"},
	{Name: "gpu.driver_version", Kind: KindOrdered, Source: "nvidia-smi driver_version"},
	{Name: "gpu.ecc", Kind: KindBool, Source: "nvidia-smi ecc.mode.current == Enabled", Trait: flag},
	{Name: "gpu.reset", Kind: KindBool, Source: "sysfs reset file present on a GPU", Trait: flag},
	{Name: "gpu.scrub", Kind: KindBool, Source: "NVIDIA GPU and libcuda.so.1 loads (built-in scrubber), or hardware.gpu_scrub_tool is configured, or simulated", Trait: flag},
	{Name: "fpga.regions", Kind: KindOrdered, Source: "number of fpga_region class devices under the PCI function (sysfs; compare numerically)"},
	{Name: "fpga.manager", Kind: KindBool, Source: "an fpga_manager class device under the PCI function (sysfs)", Trait: flag},
	{Name: "fpga.dfl", Kind: KindBool, Source: "a DFL FPGA Management Engine (dfl-fme.N) under the PCI function (sysfs)", Trait: flag},
	{Name: "fpga.bitstream_id", Kind: KindSet, Source: "DFL FME bitstream_id: the static region's loaded bitstream (sysfs)"},
	{Name: "fpga.compat_id", Kind: KindSet, Source: "fpga_region compat_id of each region that has one: the interface a partial bitstream must match (sysfs)"},
	{Name: NICFirmwarePrefix, Kind: KindOrdered, Prefix: true, Source: "devlink dev info -j, versions.running.<component>"},
	{Name: CustomPrefix, Kind: KindSet, Prefix: true, Source: "operator-declared only: bool, list (set) or string (ordered, version compare)", Trait: TraitRule{Shape: TraitOperator}},
}

// KnownCapabilities returns every capability name scour understands,
// sorted; prefix families end with ".".
func KnownCapabilities() []CapabilitySpec {
	out := append([]CapabilitySpec(nil), knownCapabilities...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LookupCapability finds the spec for name, including prefix families.
// For custom.* names the kind is only a default: operator values decide.
func LookupCapability(name string) (CapabilitySpec, bool) {
	for _, s := range knownCapabilities {
		if s.Prefix {
			if strings.HasPrefix(name, s.Name) && len(name) > len(s.Name) {
				return s, true
			}
			continue
		}
		if s.Name == name {
			return s, true
		}
	}
	return CapabilitySpec{}, false
}

func isCustom(name string) bool {
	return strings.HasPrefix(name, CustomPrefix) && len(name) > len(CustomPrefix)
}
