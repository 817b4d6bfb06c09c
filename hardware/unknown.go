package hardware

import "strings"

// Unknown reports whether capability name is unknown on d: discovery
// could not learn the fact it derives from (a tool missing, failing or
// timing out, no controller found, the device bound to a driver that
// hides it), so it is neither true nor false, neither met nor unmet. why
// is the reason Device.Absent gives.
//
// Absent also explains two capabilities known to be missing, which are
// not unknown: nvme.sanitize of a controller that answered id-ctrl with
// no sanitize method (its nvme.format is then set: a controller that
// answered always has it, true or false), and gpu.ecc that nvidia-smi,
// having listed the GPU (gpu.model not absent), reports as [N/A]. A NIC's
// firmware components are unknown together when devlink could not be
// read (the "nic.firmware.*" entry); a component devlink did not list is
// missing, not unknown. A capability that is set (an operator's
// declaration) is never unknown.
func (d *Device) Unknown(name string) (why string, unknown bool) {
	if d == nil {
		return "", false
	}
	if _, set := d.Capabilities[name]; set {
		return "", false
	}
	why, absent := d.Absent[name]
	if !absent && strings.HasPrefix(name, NICFirmwarePrefix) {
		why, absent = d.Absent[NICFirmwarePrefix+"*"]
	}
	if !absent {
		return "", false
	}
	switch name {
	case "nvme.sanitize":
		if _, idCtrlUnread := d.Absent["nvme.format"]; !idCtrlUnread {
			return "", false // id-ctrl answered: no sanitize method
		}
	case "gpu.ecc":
		if _, smiUnread := d.Absent["gpu.model"]; !smiUnread {
			return "", false // nvidia-smi listed the GPU: ECC [N/A]
		}
	}
	return why, true
}
