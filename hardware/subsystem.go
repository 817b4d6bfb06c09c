package hardware

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// ErrSharedSubsystem: a sanitize was refused because the controller's NVM
// subsystem has, or may have, other controllers. A Sanitize acts on the
// whole NVM subsystem (NVMe Base Specification, Sanitize Operations: "all
// locations in the NVM subsystem that are able to contain user data"), so
// on a shared one it erases the namespaces the other controllers use: an
// SR-IOV PF beside its VFs, the other port of a dual-port drive, another
// host's controller. The same holds for a Format NVM when Identify
// Controller FNA bit 0 (or bit 1, for a secure erase) says it applies to
// every namespace of the subsystem (SubsystemFormatRefusal). It wraps
// ErrUnsupported: the technique is refused before anything touched the
// device, so nvme-erase falls back to a format of the device's own
// namespaces, or to the overwrite.
var ErrSharedSubsystem = fmt.Errorf("the NVM subsystem is shared with other controllers, whose namespaces a subsystem-wide erase (a sanitize, or a format whose fna says it reaches every namespace) would erase too: %w", ErrUnsupported)

// SubsystemSanitizeRefusal is why a sanitize through addr's controller must
// not run, wrapping ErrSharedSubsystem, or nil when it may: the Identify
// Controller CMIC bit 1 ("the NVM subsystem may contain two or more
// controllers") is set, or sysfs lists other controllers in the same
// nvme-subsystem, and the operator has not listed addr in
// hardware.allow_subsystem_sanitize.
func SubsystemSanitizeRefusal(addr Address, n *NVMeInfo) error {
	why := sharedWhy(n)
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("sanitize of NVMe %s (controller %s) refused: %s; a sanitize erases every namespace of the NVM subsystem, those of the other controllers (other hosts' or tenants' data) included, so nothing was sanitized. "+
		"Erase the device's own namespaces with nvme-format or overwrite (nvme-erase falls back to them), or, only if every controller of the subsystem belongs to this device and holds nothing of anyone else's, list %s in hardware.allow_subsystem_sanitize: %w",
		addr, orUnnamed(n.Controller), strings.Join(why, "; "), addr, ErrSharedSubsystem)
}

// FormatReachesSubsystem says whether a Format NVM with secure erase
// setting ses reaches every namespace of the NVM subsystem, from Identify
// Controller FNA: bit 0 set, any format applies to all namespaces; bit 1
// set, a secure erase (ses > 0) does.
func FormatReachesSubsystem(fna, ses int) bool {
	return fna&1 != 0 || (ses > 0 && fna&2 != 0)
}

// SubsystemFormatRefusal is why a format with secure erase setting ses
// through addr's controller must not run, wrapping ErrSharedSubsystem, or
// nil when it may: by the predicate and operator allowance of
// SubsystemSanitizeRefusal, when n.FNA says the format reaches every
// namespace of the subsystem (FormatReachesSubsystem) and so the other
// controllers' too.
func SubsystemFormatRefusal(addr Address, n *NVMeInfo, ses int) error {
	if n == nil || !FormatReachesSubsystem(n.FNA, ses) {
		return nil
	}
	why := sharedWhy(n)
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("format -s %d of NVMe %s (controller %s) refused: %s; Identify Controller fna %#x says a format%s applies to every namespace of the NVM subsystem, those of the other controllers (other hosts' or tenants' data) included, so nothing was formatted. "+
		"Erase the device's own namespaces with overwrite (nvme-erase falls back to it), or, only if every controller of the subsystem belongs to this device and holds nothing of anyone else's, list %s in hardware.allow_subsystem_sanitize: %w",
		ses, addr, orUnnamed(n.Controller), strings.Join(why, "; "), n.FNA, map[bool]string{true: "", false: " with secure erase"}[n.FNA&1 != 0], addr, ErrSharedSubsystem)
}

// sharedWhy says why addr's NVM subsystem has or may have other
// controllers; none when it has not, or the operator allowed
// subsystem-wide erases (hardware.allow_subsystem_sanitize).
func sharedWhy(n *NVMeInfo) []string {
	if n == nil || n.SubsystemSanitizeAllowed {
		return nil
	}
	var why []string
	if len(n.OtherControllers) > 0 {
		why = append(why, fmt.Sprintf("sysfs lists other controllers in %s: %s", orUnnamed(n.Subsystem), strings.Join(n.OtherControllers, ", ")))
	}
	if n.CMIC&2 != 0 {
		why = append(why, fmt.Sprintf("Identify Controller cmic %#x has bit 1 set: the subsystem may contain two or more controllers", n.CMIC))
	}
	return why
}

func orUnnamed(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

var ctrlEntry = regexp.MustCompile(`^nvme[0-9]+$`)

// NVMeSubsystem finds the nvme-subsystem holding controller ctrl in
// class/nvme-subsystem/ (each nvme-subsys<N> links the controllers it
// holds as nvme<M>) and lists its other controllers, sorted. A kernel
// without that class (before 4.15) gives "" and none, no error: CMIC is
// then the only signal.
func (f FS) NVMeSubsystem(ctrl string) (subsys string, others []string, err error) {
	base := f.Path("class", "nvme-subsystem")
	subs, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("NVMe subsystems: %w", err)
	}
	for _, s := range subs {
		ents, err := os.ReadDir(f.Path("class", "nvme-subsystem", s.Name()))
		if err != nil {
			return "", nil, fmt.Errorf("NVMe subsystem %s: %w", s.Name(), err)
		}
		var ctrls []string
		mine := false
		for _, e := range ents {
			if !ctrlEntry.MatchString(e.Name()) {
				continue
			}
			if e.Name() == ctrl {
				mine = true
				continue
			}
			ctrls = append(ctrls, e.Name())
		}
		if mine {
			sort.Strings(ctrls)
			return s.Name(), ctrls, nil
		}
	}
	return "", nil, nil
}
