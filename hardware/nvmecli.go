package hardware

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Parsers for nvme-cli 2.x JSON output (`-o json`). Field names are
// nvme-cli's; unknown fields are ignored so newer versions still parse.

// NVMeListController is one controller of `nvme list -v -o json`.
type NVMeListController struct {
	Controller string  // "nvme0"
	Address    Address // PCI address; "" for fabrics controllers
	Model      string  // ModelNumber
	Serial     string  // SerialNumber
	Firmware   string  // Firmware
	// Namespaces are the block devices of the namespaces attached to this
	// controller: its private ones ("nvme0n1") and, under native
	// multipath, the heads ("nvme0n2") of its own path nodes ("nvme0c0n2").
	Namespaces []string
}

type nvmeListJSON struct {
	Devices []struct {
		Subsystems []struct {
			Subsystem   string
			Controllers []struct {
				Controller   string
				SerialNumber string
				ModelNumber  string
				Firmware     string
				Transport    string
				Address      string
				Namespaces   []struct{ NameSpace string }
				Paths        []struct{ Path string }
			}
		}
	}
}

// ParseNVMeList parses `nvme list -v -o json`. A controller gets its own
// namespaces and the heads of its own multipath paths, never the
// subsystem-level namespace list: that names every head of the
// subsystem, including those attached only to another controller (the
// PF's namespace seen from a VF, the other port of a dual-port drive),
// which this controller's device does not own and must never format or
// overwrite.
func ParseNVMeList(b []byte) ([]NVMeListController, error) {
	var raw nvmeListJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse nvme list -v -o json: %w", err)
	}
	var out []NVMeListController
	for _, d := range raw.Devices {
		for _, s := range d.Subsystems {
			for _, c := range s.Controllers {
				lc := NVMeListController{
					Controller: c.Controller,
					Model:      strings.TrimSpace(c.ModelNumber),
					Serial:     strings.TrimSpace(c.SerialNumber),
					Firmware:   strings.TrimSpace(c.Firmware),
				}
				if c.Transport == "pcie" {
					if a, err := ParseAddress(c.Address); err == nil {
						lc.Address = a
					}
				}
				for _, n := range c.Namespaces {
					lc.Namespaces = append(lc.Namespaces, n.NameSpace)
				}
				for _, p := range c.Paths {
					// A path node "nvme<S>c<C>n<N>" stands for the head
					// "nvme<S>n<N>" (namespaceBlock, as in sysfs).
					if head, ok := namespaceBlock(c.Controller, p.Path); ok && indexOf(lc.Namespaces, head) < 0 {
						lc.Namespaces = append(lc.Namespaces, head)
					}
				}
				out = append(out, lc)
			}
		}
	}
	return out, nil
}

// IDCtrl is the subset of `nvme id-ctrl -o json` scour uses.
type IDCtrl struct {
	VID     int    // vid
	SSVID   int    // ssvid
	SN      string // sn, trimmed (nvme-cli pads with spaces)
	MN      string // mn, trimmed
	FR      string // fr, trimmed
	CMIC    int    // cmic: bit 1 the subsystem may have two or more controllers
	OACS    int    // oacs: bit 1 Format NVM supported, bit 3 namespace management
	FNA     int    // fna: bit 2 crypto erase supported by format
	SANICAP int    // sanicap: bit 0 crypto, 1 block, 2 overwrite
}

// ParseIDCtrl parses `nvme id-ctrl <dev> -o json`.
func ParseIDCtrl(b []byte) (*IDCtrl, error) {
	var raw struct {
		VID     int    `json:"vid"`
		SSVID   int    `json:"ssvid"`
		SN      string `json:"sn"`
		MN      string `json:"mn"`
		FR      string `json:"fr"`
		CMIC    int    `json:"cmic"`
		OACS    int    `json:"oacs"`
		FNA     int    `json:"fna"`
		SANICAP int64  `json:"sanicap"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse nvme id-ctrl -o json: %w", err)
	}
	return &IDCtrl{
		VID: raw.VID, SSVID: raw.SSVID,
		SN: strings.TrimSpace(raw.SN), MN: strings.TrimSpace(raw.MN), FR: strings.TrimSpace(raw.FR),
		CMIC: raw.CMIC, OACS: raw.OACS, FNA: raw.FNA, SANICAP: int(raw.SANICAP),
	}, nil
}

// ParseSmartLog parses `nvme smart-log <dev> -o json`. critical_warning
// is a number in nvme-cli 2.x up to 2.8 and an object with "value" in
// later versions; both parse.
func ParseSmartLog(b []byte) (*SmartLog, error) {
	var raw struct {
		CriticalWarning json.RawMessage `json:"critical_warning"`
		AvailSpare      *int            `json:"avail_spare"`
		SpareThresh     *int            `json:"spare_thresh"`
		PercentUsed     *int            `json:"percent_used"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse nvme smart-log -o json: %w", err)
	}
	if raw.PercentUsed == nil || raw.AvailSpare == nil || raw.SpareThresh == nil || raw.CriticalWarning == nil {
		return nil, fmt.Errorf("parse nvme smart-log -o json: missing critical_warning, avail_spare, spare_thresh or percent_used")
	}
	cw, err := numberOrValue(raw.CriticalWarning)
	if err != nil {
		return nil, fmt.Errorf("parse nvme smart-log -o json: critical_warning: %w", err)
	}
	return &SmartLog{CriticalWarning: cw, PercentUsed: *raw.PercentUsed, AvailSpare: *raw.AvailSpare, SpareThresh: *raw.SpareThresh}, nil
}

func numberOrValue(m json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(m, &n); err == nil {
		return n, nil
	}
	var o struct {
		Value *int `json:"value"`
	}
	if err := json.Unmarshal(m, &o); err != nil || o.Value == nil {
		return 0, fmt.Errorf("%s is neither a number nor {\"value\": N}", m)
	}
	return *o.Value, nil
}

// Sanitize status (SSTAT bits 2:0).
const (
	SanitizeNever       = 0
	SanitizeDone        = 1
	SanitizeInProgress  = 2
	SanitizeFailed      = 3
	SanitizeDoneNoDeall = 4
)

// SanitizeLog is the subset of `nvme sanitize-log -o json` scour polls.
type SanitizeLog struct {
	SPROG  int // progress numerator out of 65535
	Status int // SSTAT status, SanitizeNever..SanitizeDoneNoDeall
	// CDW10 (cdw10_info) is the command dword 10 of the sanitize SSTAT
	// reports on: SANACT in bits 2:0 (2 block, 3 overwrite, 4 crypto),
	// then AUSE, OWPASS, OIPBP, NDAS; 0 when nvme-cli does not print it.
	CDW10 int
}

// ParseSanitizeLog parses `nvme sanitize-log <dev> -o json`: an object
// keyed by device name whose "sstat" is {"status": "(N) text", ...}
// (older versions print the raw sstat number; both parse).
func ParseSanitizeLog(b []byte) (*SanitizeLog, error) {
	var top map[string]struct {
		SPROG  *int            `json:"sprog"`
		SSTAT  json.RawMessage `json:"sstat"`
		SCDW10 int             `json:"cdw10_info"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("parse nvme sanitize-log -o json: %w", err)
	}
	if len(top) != 1 {
		return nil, fmt.Errorf("parse nvme sanitize-log -o json: want one device, got %d", len(top))
	}
	for _, d := range top {
		if d.SPROG == nil || d.SSTAT == nil {
			return nil, fmt.Errorf("parse nvme sanitize-log -o json: missing sprog or sstat")
		}
		st, err := sanitizeStatus(d.SSTAT)
		if err != nil {
			return nil, fmt.Errorf("parse nvme sanitize-log -o json: %w", err)
		}
		return &SanitizeLog{SPROG: *d.SPROG, Status: st, CDW10: d.SCDW10}, nil
	}
	panic("unreachable")
}

func sanitizeStatus(m json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(m, &n); err == nil {
		return n & 0x7, nil
	}
	var o struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(m, &o); err != nil {
		return 0, fmt.Errorf("sstat %s: %w", m, err)
	}
	s, ok := strings.CutPrefix(o.Status, "(")
	if i := strings.IndexByte(s, ')'); ok && i > 0 {
		if n, err := strconv.Atoi(s[:i]); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("sstat status %q: want \"(N) text\"", o.Status)
}

// SanitizeMethods lists the methods a controller's sanicap supports,
// ordered overwrite < block < crypto.
func SanitizeMethods(sanicap int) []string {
	var out []string
	if sanicap&4 != 0 {
		out = append(out, string(SanitizeOverwrite))
	}
	if sanicap&2 != 0 {
		out = append(out, string(SanitizeBlock))
	}
	if sanicap&1 != 0 {
		out = append(out, string(SanitizeCrypto))
	}
	return out
}

// sanact is nvme sanitize's -a value for an action.
func sanact(a SanitizeAction) (int, int, error) {
	switch a {
	case SanitizeBlock:
		return 2, 2, nil
	case SanitizeOverwrite:
		return 3, 4, nil
	case SanitizeCrypto:
		return 4, 1, nil
	}
	return 0, 0, fmt.Errorf("unknown sanitize action %q: want crypto, block or overwrite", a)
}
