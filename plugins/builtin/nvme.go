package builtin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

func init() {
	register(Spec{
		Name:        "nvme-sanitize",
		InDevice:    true,
		Destructive: true,
		Does:        "nvme sanitize <ctrl> -a <4 crypto|2 block|3 overwrite> (best the controller's sanicap offers, or args.action), then poll nvme sanitize-log -o json",
		Run:         sanitize,
		Needs:       nvmeDriver,
		Tools:       nvmeCLI,
		CheckArgs: func(a map[string]any) error {
			act, err := argString(a, "action", "")
			if err == nil && act != "" && !slices.Contains(hardware.SanitizeScale, act) {
				err = fmt.Errorf("action: %q is not one of %v", act, hardware.SanitizeScale)
			}
			_, perr := argDuration(a, "poll", 0)
			return errors.Join(onlyArgs(a, "action", "poll"), err, perr)
		},
	})
	register(Spec{
		Name:        "nvme-format",
		InDevice:    true,
		Destructive: true,
		Does:        "nvme format <namespace> -s 2 (crypto erase when id-ctrl fna bit 2 allows and args.crypto is not false) else -s 1 (user-data erase); never -s 0",
		Run:         format,
		Needs:       nvmeDriver,
		Tools:       nvmeCLI,
		CheckArgs: func(a map[string]any) error {
			_, err := argBool(a, "crypto", true)
			return errors.Join(onlyArgs(a, "crypto"), err)
		},
	})
}

// idCtrlUnknown is a try-again-later error when discovery could not read
// the controller's id-ctrl (nvme-cli missing, failing or timing out), so
// its oacs, fna and sanicap are unknown, not 0: discovery then lists
// nvme.format absent with the reason (a controller that answered always
// has nvme.format, true or false). nil when they are known.
//
// A device not bound to nvme (a passthrough NVMe on vfio-pci) has no
// controller to ask: that is the step's configuration, not a passing
// failure, so it is an invalid-config error naming the fix (driver: nvme),
// which keeps the device reserved and never quarantines it.
func idCtrlUnknown(d *hardware.Device, what string) error {
	why, unknown := d.Absent["nvme.format"]
	if !unknown {
		return nil
	}
	if d.Driver != "nvme" {
		return plugins.Errorf(plugins.CodeInvalidConfig, "NVMe %s is bound to %q, not nvme, so it has no controller to ask whether it supports %s and nothing was done to the device: give this step `driver: nvme` in its pipeline (docs/pipelines.md), which binds nvme for the step and back",
			d.Address, d.Driver, what)
	}
	return plugins.Errorf(plugins.CodeTryAgainLater, "NVMe %s: whether the controller supports %s is unknown: discovery could not read its id-ctrl (%s); nothing was done to the device. "+
		"Check that nvme-cli is installed at hardware.tools.nvme and that `nvme id-ctrl` answers within hardware.tool_timeout; the device stays reserved and the step is tried again",
		d.Address, what, why)
}

// sanitizeMethods lists the sanitize actions the controller supports, from
// the nvme.sanitize capability or, failing that, id-ctrl sanicap; an error
// when sanicap is unknown.
func sanitizeMethods(d *hardware.Device) ([]string, error) {
	if v, ok := d.Capabilities["nvme.sanitize"]; ok && len(v.Items) > 0 {
		return v.Items, nil
	}
	if err := idCtrlUnknown(d, "Sanitize"); err != nil {
		return nil, err
	}
	var out []string
	if d.NVMe != nil {
		for bit, m := range map[int]hardware.SanitizeAction{2: hardware.SanitizeOverwrite, 1: hardware.SanitizeBlock, 0: hardware.SanitizeCrypto} {
			if d.NVMe.SANICAP&(1<<bit) != 0 {
				out = append(out, string(m))
			}
		}
	}
	return out, nil
}

// chooseSanitize picks crypto > block > overwrite among what the controller
// supports, or checks a forced action. On an NVM subsystem shared with
// other controllers it refuses (unsupported) unless the operator allowed
// it (hardware.SubsystemSanitizeRefusal): the sanitize would erase their
// namespaces too.
func chooseSanitize(d *hardware.Device, forced string) (hardware.SanitizeAction, error) {
	have, err := sanitizeMethods(d)
	if err != nil {
		return "", err
	}
	if err := hardware.SubsystemSanitizeRefusal(d.Address, d.NVMe); err != nil {
		return "", plugins.Errorf(plugins.CodeUnsupported, "%v", err)
	}
	if forced != "" {
		if !slices.Contains(have, forced) {
			return "", plugins.Errorf(plugins.CodeUnsupported, "NVMe %s does not support sanitize action %q (supports %v): change args.action or use nvme-format/overwrite", d.Address, forced, have)
		}
		return hardware.SanitizeAction(forced), nil
	}
	for _, m := range slices.Backward(hardware.SanitizeScale) {
		if slices.Contains(have, m) {
			return hardware.SanitizeAction(m), nil
		}
	}
	return "", plugins.Errorf(plugins.CodeUnsupported, "NVMe %s supports no sanitize action (sanicap empty): use nvme-format or overwrite in its pipeline", d.Address)
}

// sanitizeTechnique names each sanitize action as IEEE 2883 does.
var sanitizeTechnique = map[hardware.SanitizeAction]string{
	hardware.SanitizeCrypto:    "Crypto Erase",
	hardware.SanitizeBlock:     "Block Erase",
	hardware.SanitizeOverwrite: "Overwrite",
}

// ScopeKey is the detail in which a sanitize step records what it
// reaches (SanitizeScope).
const ScopeKey = "scope"

// SanitizeScope is what a sanitize reaches. The NVMe Base Specification
// (2.0, Sanitize Operations) makes its scope "all locations in the NVM
// subsystem that are able to contain user data": every namespace of the
// subsystem, whether attached to this controller, to another one or to
// none (a tenant's created-then-detached namespace), and unallocated
// media. So no namespace is hidden from it and no hidden-namespace check
// runs before it; on a subsystem with several controllers it also erases
// the namespaces the other controllers use.
const SanitizeScope = "the whole NVM subsystem: every namespace, attached to this controller, to another or to none, and unallocated media (NVMe Base Specification, Sanitize Operations)"

func sanitize(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	forced, _ := argString(t.Args, "action", "")
	poll, err := argDuration(t.Args, "poll", 5*time.Second)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	action, err := chooseSanitize(t.Device, forced)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	e := withSamples(ctx, be, t.Device, sanitizeErasure(action))
	if err := be.Sanitize(ctx, t.Device.Address, action, poll, t.progress); err != nil {
		return nil, fmt.Errorf("sanitize (%s) of NVMe %s: %w", action, t.Device.Address, err)
	}
	t.progress(1)
	return erased(e, map[string]any{"action": string(action), ScopeKey: SanitizeScope, "seconds": time.Since(start).Seconds()}), nil
}

// formatSES is 2 (crypto erase) when the controller's fna allows it and the
// step does not opt out, else 1 (user-data erase). Never 0: `-s 0` erases
// nothing yet reports success.
func formatSES(d *hardware.Device, crypto bool) int {
	if !crypto {
		return 1
	}
	if v, ok := d.Capabilities["nvme.crypto_format"]; ok {
		if v.Bool {
			return 2
		}
		return 1
	}
	if d.NVMe != nil && d.NVMe.FNA&0x4 != 0 {
		return 2
	}
	return 1
}

// formatSupported says whether the controller supports Format NVM, from
// the nvme.format capability or, failing that, id-ctrl oacs bit 1; an
// error when oacs is unknown.
func formatSupported(d *hardware.Device) (bool, error) {
	if v, ok := d.Capabilities["nvme.format"]; ok {
		return v.Bool, nil
	}
	if err := idCtrlUnknown(d, "Format NVM"); err != nil {
		return false, err
	}
	return d.NVMe != nil && d.NVMe.OACS&0x2 != 0, nil
}

func format(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	crypto, err := argBool(t.Args, "crypto", true)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	d := t.Device
	if ok, err := formatSupported(d); err != nil {
		return nil, err
	} else if !ok {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "NVMe %s does not support Format NVM (oacs bit 1 clear)", d.Address)
	}
	if d.NVMe == nil || len(d.NVMe.Namespaces) == 0 {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "NVMe %s has no namespace block devices (bound to %q): give the step driver: nvme", d.Address, d.Driver)
	}
	ses := formatSES(d, crypto)
	// With fna bit 0 (or bit 1 and a secure erase) the format reaches
	// every namespace of the subsystem: refused on a shared one, as a
	// sanitize is.
	if err := hardware.SubsystemFormatRefusal(d.Address, d.NVMe, ses); err != nil {
		return nil, err
	}
	e := withSamples(ctx, be, d, formatErasure(ses))
	details := map[string]any{"ses": ses, "namespaces": d.NVMe.Namespaces}
	for i, ns := range d.NVMe.Namespaces {
		if err := formatNS(ctx, be, d.Address, ns, ses, details); err != nil {
			return nil, fmt.Errorf("format -s %d of %s on NVMe %s: %w", ses, ns, d.Address, err)
		}
		if err := hiddenUnchecked(d.Address, details, nil); err != nil {
			return nil, err
		}
		t.progress(float64(i+1) / float64(len(d.NVMe.Namespaces)))
	}
	return erased(e, details), nil
}

// formatReporter is a backend whose format says what it checked before
// formatting (hardware.HiddenNamespacesCheckedKey and its note) for the
// cleaning record.
type formatReporter interface {
	FormatDetails(ctx context.Context, addr hardware.Address, ns string, ses int) (map[string]any, error)
}

var _ formatReporter = (*hardware.Real)(nil)

// formatNS formats ns and copies what a formatReporter says into details.
// The checks are of the controller's subsystem, the same for every
// namespace of it.
func formatNS(ctx context.Context, be hardware.Backend, addr hardware.Address, ns string, ses int, details map[string]any) error {
	r, ok := be.(formatReporter)
	if !ok {
		return be.Format(ctx, addr, ns, ses)
	}
	d, err := r.FormatDetails(ctx, addr, ns, ses)
	maps.Copy(details, d)
	return err
}
