package hardware

import (
	"fmt"
	"sort"
	"strings"
)

// DeviceReport is a JSON-friendly view of a Device for `scourctl devices`
// and logs: capability values rendered as strings (true, [a, b], [a < b]).
type DeviceReport struct {
	Address      Address           `json:"address"`
	Kind         DeviceKind        `json:"kind"`
	Vendor       string            `json:"vendor"`
	Device       string            `json:"device"`
	Driver       string            `json:"driver,omitempty"`
	IOMMUGroup   *int              `json:"iommu_group,omitempty"`
	NUMANode     *int              `json:"numa_node,omitempty"`
	Model        string            `json:"model,omitempty"`
	Serial       string            `json:"serial,omitempty"`
	Firmware     string            `json:"firmware,omitempty"`
	Namespaces   []string          `json:"namespaces,omitempty"`
	Capabilities map[string]string `json:"capabilities"`
	Absent       map[string]string `json:"absent,omitempty"`
}

// Describe builds the report for dev.
func Describe(dev *Device) DeviceReport {
	r := DeviceReport{
		Address: dev.Address, Kind: dev.Kind, Vendor: dev.VendorID, Device: dev.DeviceID, Driver: dev.Driver,
		IOMMUGroup: dev.IOMMUGroup, NUMANode: dev.NUMANode, Model: dev.Model, Serial: dev.Serial, Firmware: dev.Firmware,
		Capabilities: map[string]string{}, Absent: dev.Absent,
	}
	if dev.NVMe != nil {
		r.Namespaces = dev.NVMe.Namespaces
	}
	for n, v := range dev.Capabilities {
		r.Capabilities[n] = v.String()
	}
	return r
}

// Text renders the report for a terminal: a header line, then one line
// per capability and per absent capability with its reason.
func (r DeviceReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s  %s:%s  driver=%s", r.Address, r.Kind, r.Vendor, r.Device, orDash(r.Driver))
	if r.Model != "" {
		fmt.Fprintf(&b, "  %q", r.Model)
	}
	if r.Firmware != "" {
		fmt.Fprintf(&b, "  fw=%s", r.Firmware)
	}
	b.WriteByte('\n')
	for _, n := range sortedKeys(r.Capabilities) {
		fmt.Fprintf(&b, "    %-28s %s\n", n, r.Capabilities[n])
	}
	for _, n := range sortedKeys(r.Absent) {
		fmt.Fprintf(&b, "    %-28s absent: %s\n", n, r.Absent[n])
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
