package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/placement"
)

const deviceSpecHelp = `Prints, per device, the nova.conf [pci] device_spec entry that makes
Nova report scour's capability traits (CUSTOM_SCOUR_CAP_*) on the device's
resource provider, so flavors can require them (docs/placement.md).

Nova sets each PCI device provider's traits to its own set on every update
and removes any other trait; the custom traits it keeps come from the
device_spec entry that matches the device (the "traits" tag). So scour
does not write capability traits to Placement: put these entries in
nova.conf's [pci] section in place of the entries that match these
devices now (Nova uses the first entry that matches a device), keeping
your own tags (--resource-class, --trait), and restart nova-compute.

Only capabilities that stay true for the device's life become traits:
wear (nvme.percent_used) and health (nvme.critical_warning,
nvme.spare_ok) change, and would go stale in a configuration file; scour
checks those itself before every cleaning. NVMe capabilities need the
device bound to the nvme driver when discovered (run it before the
device is first handed to vfio-pci, or unbind it): "scourctl devices"
shows what is absent and why.

Devices: the addresses given, else every NVMe, GPU and NIC function found
(--all adds generic ones). Hardware: scourd's configuration (--config), or
--hardware-config / --sysfs.`

func init() {
	register(func(c *cli) *cobra.Command {
		var f deviceSpecFlags
		cmd := &cobra.Command{
			Use:   "nova-device-spec [ADDRESS...]",
			Short: "print nova.conf [pci] device_spec entries carrying each device's capability traits",
			Long:  deviceSpecHelp,
			RunE: func(cmd *cobra.Command, args []string) error {
				for _, t := range f.traits {
					if t == "" || strings.Contains(t, ",") {
						return usagef("--trait %q: one trait name per --trait (Nova splits the traits tag at commas)", t)
					}
				}
				hw, node, err := c.deviceSpecHardware(f.hardwareConfig)
				if err != nil {
					return err
				}
				devs, derr := discover(cmd.Context(), hw, f.devicesFlags, args, c.stderr)
				if err := writeDeviceSpecs(c.stdout, node, devs, f); err != nil {
					return err
				}
				return derr
			},
		}
		fl := cmd.Flags()
		f.addFlags(fl, "YAML file holding the hardware section, instead of scourd's configuration")
		fl.StringVar(&f.resourceClass, "resource-class", "", "resource_class tag for every entry (default: none, Nova's CUSTOM_PCI_<VENDOR>_<PRODUCT>)")
		fl.StringArrayVar(&f.traits, "trait", nil, "another trait for every entry (repeatable): the operator's own, which Nova would otherwise remove too")
		return cmd
	})
}

type deviceSpecFlags struct {
	devicesFlags
	resourceClass string
	traits        []string
}

// deviceSpecHardware is the hardware section to discover with: the file
// given, else scourd's configuration when there is one, else the
// defaults; and the compute node's name when known.
func (c *cli) deviceSpecHardware(file string) (hardware.Config, string, error) {
	if file != "" {
		hw, err := loadHardwareConfig(file)
		return hw, "", err
	}
	cfg, err := c.loadConfig(true)
	if err != nil || cfg == nil {
		return hardware.Config{}, "", err
	}
	return cfg.Hardware, cfg.Node, nil
}

// deviceSpec is one [pci] device_spec entry as Nova reads it (JSON; tags
// are strings except one_time_use). Field order is the output's.
type deviceSpec struct {
	Address       string `json:"address"`
	VendorID      string `json:"vendor_id"`
	ProductID     string `json:"product_id"`
	ResourceClass string `json:"resource_class,omitempty"`
	OneTimeUse    bool   `json:"one_time_use"`
	Traits        string `json:"traits,omitempty"`
}

// deviceSpecOf is d's entry: one-time-use (scour cleans only those),
// matched by address and ids, with its static capability traits and the
// operator's extra ones.
func deviceSpecOf(d *hardware.Device, f deviceSpecFlags) deviceSpec {
	traits := append(placement.CapabilityTraits(d.Capabilities), f.traits...)
	return deviceSpec{
		Address:       string(d.Address),
		VendorID:      pciID(d.VendorID),
		ProductID:     pciID(d.DeviceID),
		ResourceClass: f.resourceClass,
		OneTimeUse:    true,
		Traits:        strings.Join(traits, ","),
	}
}

// pciID is a sysfs id ("0x144D") as device_spec writes it ("144d").
func pciID(s string) string { return strings.TrimPrefix(strings.ToLower(s), "0x") }

func writeDeviceSpecs(w io.Writer, node string, devs []*hardware.Device, f deviceSpecFlags) error {
	host := ""
	if node != "" {
		host = " of " + node
	}
	fmt.Fprintf(w, "# nova.conf [pci] device_spec entries for the devices%s, from scour's discovery\n", host)
	fmt.Fprintf(w, "# (scourctl nova-device-spec). Replace the entries that match these devices;\n")
	fmt.Fprintf(w, "# needs [pci] report_in_placement = True. Then restart nova-compute.\n")
	fmt.Fprintf(w, "[pci]\n")
	for _, d := range devs {
		b, err := json.Marshal(deviceSpecOf(d, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "device_spec = %s\n", b)
	}
	return nil
}
