package hardware

import (
	"strconv"
	"strings"
)

// KindFromClass maps a PCI class code ("0x010802") to a device kind:
// 0x0108 NVM controller, 0x03 display, 0x02 network, 0x12 processing
// accelerator (FPGA cards: Intel PAC/N3000 and Xilinx Alveo report it),
// else generic.
func KindFromClass(class string) DeviceKind {
	c := strings.TrimPrefix(strings.ToLower(class), "0x")
	switch {
	case strings.HasPrefix(c, "0108"):
		return KindNVMe
	case strings.HasPrefix(c, "03"):
		return KindGPU
	case strings.HasPrefix(c, "02"):
		return KindNIC
	case strings.HasPrefix(c, "12"):
		return KindFPGA
	}
	return KindGeneric
}

// DeriveCapabilities computes the discovered capabilities of dev from its
// facts; both backends use it, so the names in docs/hardware.md hold for
// the simulator too. Facts that are unknown produce no capability, and
// names listed in dev.Absent are never set.
func DeriveCapabilities(dev *Device) Capabilities {
	c := Capabilities{
		"kind":      Set(string(dev.Kind)),
		"pci.reset": Bool(dev.ResetAvailable),
		"pci.iommu": Bool(dev.IOMMUGroup != nil),
		"pci.sriov": Bool(dev.SRIOVTotalVFs != nil && *dev.SRIOVTotalVFs > 0),
	}
	setIf(c, "pci.vendor", dev.VendorID)
	setIf(c, "pci.device", dev.DeviceID)
	setIf(c, "pci.class", dev.Class)
	setIf(c, "pci.driver", dev.Driver)
	if dev.NUMANode != nil {
		c["pci.numa_node"] = Set(strconv.Itoa(*dev.NUMANode))
	}
	if n := dev.NVMe; n != nil {
		c["nvme.block_device"] = Bool(!n.BoundToVFIO && len(n.Namespaces) > 0)
		if (n.Controller != "" && !n.BoundToVFIO) || n.Remembered {
			deriveNVMe(c, dev, n)
		}
	}
	if g := dev.GPU; g != nil {
		c["gpu.reset"] = Bool(g.ResetSupport)
		c["gpu.ecc"] = Bool(g.ECCSupported)
		setIf(c, "gpu.model", g.Name)
		if g.MemoryMiB > 0 {
			c["gpu.memory_mib"] = Ordered(strconv.Itoa(g.MemoryMiB))
		}
		if g.DriverVer != "" {
			c["gpu.driver_version"] = Ordered(g.DriverVer)
		}
	}
	if nic := dev.NIC; nic != nil {
		for comp, v := range nic.Firmware {
			c[NICFirmwarePrefix+comp] = Ordered(v)
		}
	}
	if f := dev.FPGA; f != nil {
		deriveFPGA(c, f)
	}
	// A capability with a reason in Absent is unknown, not false: an
	// id-ctrl that failed must not read as "format not supported".
	for name := range dev.Absent {
		delete(c, name)
	}
	return c
}

func deriveNVMe(c Capabilities, dev *Device, n *NVMeInfo) {
	c["nvme.format"] = Bool(n.OACS&2 != 0)
	c["nvme.crypto_format"] = Bool(n.OACS&2 != 0 && n.FNA&4 != 0)
	if m := SanitizeMethods(n.SANICAP); len(m) > 0 {
		c["nvme.sanitize"] = Ordered(m...)
	}
	if dev.Firmware != "" {
		c["nvme.firmware"] = Ordered(dev.Firmware)
	}
	setIf(c, "nvme.model", dev.Model)
	if s := n.Smart; s != nil {
		c["nvme.percent_used"] = Ordered(strconv.Itoa(s.PercentUsed))
		c["nvme.critical_warning"] = Bool(s.CriticalWarning != 0)
		c["nvme.spare_ok"] = Bool(s.AvailSpare >= s.SpareThresh)
	}
}

func setIf(c Capabilities, name, v string) {
	if v != "" {
		c[name] = Set(v)
	}
}
