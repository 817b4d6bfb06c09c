package hardware

import (
	"errors"
	"os"
	"strings"
)

// PCI Vital Product Data (PCI Local Bus 3.0, section 6.4; sysfs `vpd`):
// large resources 0x82 (identifier string: the product name) and 0x90
// (read-only keywords: "SN" serial number, "PN" part number, ...), ended
// by the small resource 0x78. The kernel serves it from config space
// whatever driver is bound, so it can name a device on vfio-pci, where an
// NVMe's own identify data cannot be read. Many drives (and QEMU's NVMe)
// have none.

// VPD is what scour reads from a device's VPD.
type VPD struct {
	Product string // identifier string
	Serial  string // VPD-R keyword SN
}

// ParseVPD parses raw VPD bytes.
func ParseVPD(b []byte) (VPD, error) {
	var v VPD
	for len(b) > 0 {
		tag := b[0]
		if tag&0x80 == 0 { // small resource
			if tag>>3 == 0x0f { // end tag
				return v, nil
			}
			n := int(tag & 0x07)
			if len(b) < 1+n {
				return v, errors.New("vpd: truncated small resource")
			}
			b = b[1+n:]
			continue
		}
		if len(b) < 3 {
			return v, errors.New("vpd: truncated large resource header")
		}
		n := int(b[1]) | int(b[2])<<8
		if len(b) < 3+n {
			return v, errors.New("vpd: truncated large resource")
		}
		data := b[3 : 3+n]
		switch tag {
		case 0x82:
			v.Product = clean(data)
		case 0x90:
			for len(data) >= 3 {
				kl := int(data[2])
				if len(data) < 3+kl {
					return v, errors.New("vpd: truncated keyword")
				}
				if string(data[:2]) == "SN" {
					v.Serial = clean(data[3 : 3+kl])
				}
				data = data[3+kl:]
			}
		}
		b = b[3+n:]
	}
	return v, nil
}

func clean(b []byte) string {
	return strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
}

// VPD reads and parses addr's sysfs vpd; an error when the device has
// none (no file, or the kernel cannot read it).
func (f FS) VPD(addr Address) (VPD, error) {
	b, err := os.ReadFile(f.devPath(addr, "vpd"))
	if err != nil {
		return VPD{}, err
	}
	if len(b) == 0 {
		return VPD{}, errors.New("vpd: empty")
	}
	return ParseVPD(b)
}
