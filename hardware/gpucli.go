package hardware

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// NvidiaSMIQuery is the --query-gpu field list scour asks for, in order.
const NvidiaSMIQuery = "pci.bus_id,name,memory.total,driver_version,ecc.mode.current,serial,vbios_version"

// NvidiaGPU is one line of
// `nvidia-smi --query-gpu=<NvidiaSMIQuery> --format=csv,noheader,nounits`.
type NvidiaGPU struct {
	Address   Address // pci.bus_id ("00000000:41:00.0") normalised
	Name      string  // name
	MemoryMiB int     // memory.total (MiB with nounits)
	Driver    string  // driver_version
	ECC       string  // ecc.mode.current: Enabled, Disabled or [N/A]
	Serial    string  // serial
	VBIOS     string  // vbios_version
}

// ParseNvidiaSMI parses the CSV output, one GPU per line.
func ParseNvidiaSMI(b []byte) ([]NvidiaGPU, error) {
	r := csv.NewReader(strings.NewReader(string(b)))
	r.TrimLeadingSpace = true
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("parse nvidia-smi csv: %w", err)
	}
	var out []NvidiaGPU
	for i, rec := range recs {
		if len(rec) != 7 {
			return nil, fmt.Errorf("parse nvidia-smi csv: line %d has %d fields, want 7 (%s)", i+1, len(rec), NvidiaSMIQuery)
		}
		addr, err := parseBusID(rec[0])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi csv: line %d: %w", i+1, err)
		}
		mem, err := strconv.Atoi(strings.TrimSpace(rec[2]))
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi csv: line %d: memory.total %q: %w", i+1, rec[2], err)
		}
		out = append(out, NvidiaGPU{Address: addr, Name: rec[1], MemoryMiB: mem, Driver: rec[3], ECC: rec[4], Serial: rec[5], VBIOS: rec[6]})
	}
	return out, nil
}

// parseBusID accepts nvidia-smi's 8-digit PCI domain ("00000000:41:00.0").
func parseBusID(s string) (Address, error) {
	s = strings.TrimSpace(s)
	if dom, rest, ok := strings.Cut(s, ":"); ok && len(dom) == 8 && strings.Count(rest, ":") == 1 {
		s = dom[4:] + ":" + rest
	}
	return ParseAddress(s)
}

// DevlinkInfo is one device of `devlink dev info -j`.
type DevlinkInfo struct {
	Handle  string            // "pci/0000:3b:00.0"
	Driver  string            // driver
	Serial  string            // serial_number
	Fixed   map[string]string // versions.fixed (board.id, fw.psid)
	Running map[string]string // versions.running (fw.version, fw)
	Stored  map[string]string // versions.stored (what boots next)
}

// ParseDevlinkInfo parses `devlink dev info -j [pci/<addr>]`.
func ParseDevlinkInfo(b []byte) ([]DevlinkInfo, error) {
	var raw struct {
		Info map[string]struct {
			Driver       string `json:"driver"`
			SerialNumber string `json:"serial_number"`
			Versions     struct {
				Fixed   map[string]string `json:"fixed"`
				Running map[string]string `json:"running"`
				Stored  map[string]string `json:"stored"`
			} `json:"versions"`
		} `json:"info"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse devlink dev info -j: %w", err)
	}
	var out []DevlinkInfo
	for h, d := range raw.Info {
		out = append(out, DevlinkInfo{Handle: h, Driver: d.Driver, Serial: d.SerialNumber,
			Fixed: d.Versions.Fixed, Running: d.Versions.Running, Stored: d.Versions.Stored})
	}
	return out, nil
}
