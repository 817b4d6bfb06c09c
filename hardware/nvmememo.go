package hardware

import (
	"fmt"
	"sync"
)

// NVMeMemo remembers what an NVMe controller said about itself (identify
// controller: model, serial, firmware, oacs, fna, sanicap) the last time
// this process saw it bound to nvme. A passthrough NVMe lives on
// vfio-pci, where the kernel exposes none of it (no controller, no
// nvme/ directory in sysfs, and QEMU's and most drives' PCI functions
// have no VPD); a pipeline step with driver: nvme binds it for a moment,
// and from then on discovery on vfio-pci still names the drive and knows
// its erase capabilities. SMART values are never remembered: they change.
//
// Entries are keyed by address and checked against the PCI ids, which
// catch only a card of another model: a drive of the same model swapped
// into the slot has the same ids and is named as the old one until a step
// binds it to nvme and shows its serial (the pipeline then stops a run
// opened for the old drive). The firmware may be stale too (a tenant can
// update it through passthrough): the pipeline records the one a step
// bound to nvme sees.
type NVMeMemo struct {
	mu sync.Mutex
	m  map[Address]nvmeFacts
}

type nvmeFacts struct {
	ids                     string
	model, serial, firmware string
	oacs, fna, sanicap      int
	cmic                    int
	subsystem               string
	others                  []string
	idCtrl                  bool // oacs/fna/sanicap/cmic known
}

func pciIDs(d *Device) string {
	return fmt.Sprintf("%s:%s:%s:%s", d.VendorID, d.DeviceID, d.SubsystemVendor, d.SubsystemDevice)
}

// remember keeps what an nvme-bound discovery of dev learned.
func (m *NVMeMemo) remember(dev *Device) {
	n := dev.NVMe
	if m == nil || n == nil || dev.Driver != "nvme" || (dev.Serial == "" && dev.Model == "") {
		return
	}
	_, idAbsent := dev.Absent["nvme.format"]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[Address]nvmeFacts{}
	}
	m.m[dev.Address] = nvmeFacts{ids: pciIDs(dev), model: dev.Model, serial: dev.Serial, firmware: dev.Firmware,
		oacs: n.OACS, fna: n.FNA, sanicap: n.SANICAP, cmic: n.CMIC, subsystem: n.Subsystem, others: n.OtherControllers, idCtrl: !idAbsent}
}

// recall fills a dev not bound to nvme with what was remembered of it,
// and clears the reasons those facts were absent. It reports whether it
// knew the device.
func (m *NVMeMemo) recall(dev *Device) bool {
	n := dev.NVMe
	if m == nil || n == nil || dev.Driver == "nvme" {
		return false
	}
	m.mu.Lock()
	f, ok := m.m[dev.Address]
	m.mu.Unlock()
	if !ok || f.ids != pciIDs(dev) {
		return false
	}
	dev.Model, dev.Serial, dev.Firmware = f.model, f.serial, f.firmware
	n.Remembered = true
	delete(dev.Absent, "nvme.model")
	delete(dev.Absent, "nvme.firmware")
	if f.idCtrl {
		n.OACS, n.FNA, n.SANICAP, n.CMIC = f.oacs, f.fna, f.sanicap, f.cmic
		n.Subsystem, n.OtherControllers = f.subsystem, f.others
		delete(dev.Absent, "nvme.format")
		delete(dev.Absent, "nvme.crypto_format")
		delete(dev.Absent, "nvme.sanitize")
		if SanitizeMethods(f.sanicap) == nil {
			dev.Absent["nvme.sanitize"] = fmt.Sprintf("controller reports no sanitize support (sanicap %#x, as last seen bound to nvme)", f.sanicap)
		}
	}
	return true
}

// Remember and Recall are remember and recall for other backends (the
// simulator) that must behave as the real one does.
func (m *NVMeMemo) Remember(dev *Device) { m.remember(dev) }

// Recall: see recall.
func (m *NVMeMemo) Recall(dev *Device) bool { return m.recall(dev) }
