package hardware

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// nvmeCtrl returns the controller name of an nvme-bound device, or
// ErrWrongDriver / ErrUnsupported explaining why there is none.
func (r *Real) nvmeCtrl(ctx context.Context, addr Address) (*Device, string, error) {
	p, err := r.fs.PCIDevice(addr)
	if err != nil {
		return nil, "", err
	}
	dev := DeviceFromPCI(p)
	if dev.Kind != KindNVMe {
		return nil, "", fmt.Errorf("%s is a %s device, not NVMe: %w", addr, dev.Kind, ErrUnsupported)
	}
	if dev.Driver != "nvme" {
		return nil, "", fmt.Errorf("%s is bound to %q; bind it to nvme first: %w", addr, dev.Driver, ErrWrongDriver)
	}
	dev.NVMe = &NVMeInfo{}
	r.nvmeController(ctx, dev, p)
	if dev.NVMe.Controller == "" {
		return nil, "", fmt.Errorf("%s: no NVMe controller found (nvme list and sysfs): %w", addr, ErrUnsupported)
	}
	return dev, dev.NVMe.Controller, nil
}

func (r *Real) idCtrl(ctx context.Context, ctrl string) (*IDCtrl, error) {
	out, err := r.run.Run(ctx, r.cfg.Tools.NVMe, "id-ctrl", "/dev/"+ctrl, "-o", "json")
	if err != nil {
		return nil, err
	}
	return ParseIDCtrl(out)
}

// SmartLog runs nvme smart-log on addr's controller.
func (r *Real) SmartLog(ctx context.Context, addr Address) (*SmartLog, error) {
	_, ctrl, err := r.nvmeCtrl(ctx, addr)
	if err != nil {
		return nil, err
	}
	out, err := r.run.Run(ctx, r.cfg.Tools.NVMe, "smart-log", "/dev/"+ctrl, "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("smart log of %s: %w", addr, err)
	}
	return ParseSmartLog(out)
}

// Sanitize starts `nvme sanitize <ctrl> -a <2|3|4>` and polls
// `nvme sanitize-log` every poll until SSTAT says done or failed,
// reporting SPROG/65535 as progress. The controller's sanicap must list
// the action (else ErrUnsupported); ctx bounds the whole wait. On an NVM
// subsystem that has or may have other controllers (cmic bit 1, other
// controllers in sysfs) it refuses with ErrSharedSubsystem before
// touching the drive, unless hardware.allow_subsystem_sanitize lists addr
// (SubsystemSanitizeRefusal).
//
// A sanitize keeps running inside the drive when scourd dies, is stopped
// or passes the step's deadline, and the controller refuses a new one
// with Sanitize In Progress until it ends. So the log is read first: the
// same action already running is joined (polled to its end, not
// restarted); another one is waited for, then ours starts.
func (r *Real) Sanitize(ctx context.Context, addr Address, action SanitizeAction, poll time.Duration, p Progress) error {
	act, bit, err := sanact(action)
	if err != nil {
		return fmt.Errorf("sanitize %s: %w", addr, err)
	}
	d, ctrl, err := r.nvmeCtrl(ctx, addr)
	if err != nil {
		return err
	}
	id, err := r.idCtrl(ctx, ctrl)
	if err != nil {
		return fmt.Errorf("sanitize %s: read sanicap: %w", addr, err)
	}
	if id.SANICAP&bit == 0 {
		return fmt.Errorf("sanitize %s with %s: controller supports %v (sanicap %#x): %w", addr, action, SanitizeMethods(id.SANICAP), id.SANICAP, ErrUnsupported)
	}
	// Asked again here, not taken from discovery: a sanitize reaches
	// every controller's namespaces in the subsystem.
	d.NVMe.CMIC = id.CMIC
	r.subsystemOf(d)
	if err := SubsystemSanitizeRefusal(addr, d.NVMe); err != nil {
		r.log.Warn("sanitize refused: the NVM subsystem is shared", "device", addr, "controller", ctrl, "err", err)
		return err
	}
	dev := "/dev/" + ctrl
	if poll <= 0 {
		poll = 5 * time.Second
	}
	running, err := r.sanitizeLog(ctx, addr, dev)
	if err != nil {
		return err
	}
	if running.Status == SanitizeInProgress {
		// `nvme sanitize -a N` sends CDW10 = N (no AUSE, OWPASS, NDAS):
		// only a sanitize started exactly so is the one asked for.
		if running.CDW10 == act {
			r.log.Info("a sanitize with the same action is already running in the drive (left by an earlier try): joining it instead of starting another", "device", addr, "action", action, "progress", float64(running.SPROG)/65535)
			return r.pollSanitize(ctx, addr, dev, poll, p)
		}
		r.log.Warn("another sanitize is already running in the drive: waiting for it to end before starting ours", "device", addr, "running_cdw10", running.CDW10, "action", action)
		if err := r.pollSanitize(ctx, addr, dev, poll, nil); err != nil && !errors.Is(err, errSanitizeFailed) {
			return fmt.Errorf("sanitize %s (%s): waiting for the sanitize already running (cdw10 %#x) to end: %w", addr, action, running.CDW10, err)
		}
	}
	if _, err := r.run.Run(ctx, r.cfg.Tools.NVMe, "sanitize", dev, "-a", strconv.Itoa(act)); err != nil {
		return fmt.Errorf("sanitize %s (%s): start: %w", addr, action, err)
	}
	return r.pollSanitize(ctx, addr, dev, poll, p)
}

// errSanitizeFailed: the controller reports the last sanitize failed.
var errSanitizeFailed = errors.New("the controller reports the sanitize failed (SSTAT 3)")

func (r *Real) sanitizeLog(ctx context.Context, addr Address, dev string) (*SanitizeLog, error) {
	out, err := r.run.Run(ctx, r.cfg.Tools.NVMe, "sanitize-log", dev, "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("sanitize %s: read sanitize-log: %w", addr, err)
	}
	log, err := ParseSanitizeLog(out)
	if err != nil {
		return nil, fmt.Errorf("sanitize %s: %w", addr, err)
	}
	return log, nil
}

func (r *Real) pollSanitize(ctx context.Context, addr Address, dev string, poll time.Duration, p Progress) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	seenRunning := false
	for {
		log, err := r.sanitizeLog(ctx, addr, dev)
		if err != nil {
			return err
		}
		switch log.Status {
		case SanitizeInProgress:
			seenRunning = true
			if p != nil {
				p(float64(log.SPROG) / 65535)
			}
		case SanitizeDone, SanitizeDoneNoDeall:
			if p != nil {
				p(1)
			}
			return nil
		case SanitizeFailed:
			return fmt.Errorf("sanitize %s: %w; the device stays out of the pool until a sanitize succeeds", addr, errSanitizeFailed)
		case SanitizeNever:
			if seenRunning {
				return fmt.Errorf("sanitize %s: sanitize-log went from in progress to never sanitized", addr)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sanitize %s: still running when the step's deadline passed: %w", addr, ctx.Err())
		case <-t.C:
		}
	}
}

// Format runs `nvme format <ns> -s <ses> --force`: see FormatDetails.
func (r *Real) Format(ctx context.Context, addr Address, namespace string, ses int) error {
	_, err := r.FormatDetails(ctx, addr, namespace, ses)
	return err
}

// Detail keys FormatDetails records for the cleaning record.
const (
	// HiddenNamespacesCheckedKey: true when the subsystem was checked for
	// allocated namespaces not attached to this controller and had none
	// that no controller holds; false (from a backend that reports a
	// check it could not make, HiddenNamespacesNoteKey saying why) fails
	// the erasing step closed.
	HiddenNamespacesCheckedKey = "hidden_namespaces_checked"
	HiddenNamespacesNoteKey    = "hidden_namespaces_note"
)

// FormatDetails runs `nvme format <ns> -s <ses> --force`. ses 1 is a
// user-data erase, 2 a crypto erase (needs fna bit 2); 0 is refused
// because it erases nothing yet reports success. namespace must be one of
// addr's own namespaces ("/dev/nvme0n1" or "nvme0n1").
//
// With namespace management (oacs bit 3) a single-controller subsystem
// (cmic bit 1 clear) must have no allocated namespace that is not attached
// to the controller (ErrHiddenNamespaces, before anything is formatted).
// On a subsystem that may have several controllers (cmic bit 1: SR-IOV
// PF and VFs, dual-port drives) the namespaces allocated and not attached
// here may be other controllers' live ones, so each one's attached
// controllers are read (multiControllerNamespaces): one attached to none
// refuses the format (ErrHiddenNamespaces), ones attached elsewhere are
// noted, and when the lists cannot be read nothing is formatted (a
// transient error). The details are for the step's record; nil when
// namespace management is off.
//
// On a shared subsystem (as for Sanitize) a format whose fna says it
// reaches every namespace of the subsystem is refused with
// ErrSharedSubsystem (SubsystemFormatRefusal) before anything runs.
func (r *Real) FormatDetails(ctx context.Context, addr Address, namespace string, ses int) (map[string]any, error) {
	if ses != 1 && ses != 2 {
		return nil, fmt.Errorf("format %s %s: secure erase setting %d refused: want 1 (user data) or 2 (crypto); 0 erases nothing", addr, namespace, ses)
	}
	dev, ctrl, err := r.nvmeCtrl(ctx, addr)
	if err != nil {
		return nil, err
	}
	ns := "/dev/" + strings.TrimPrefix(namespace, "/dev/")
	if indexOf(dev.NVMe.Namespaces, ns) < 0 {
		return nil, fmt.Errorf("format %s: namespace %s is not one of this device's %v", addr, namespace, dev.NVMe.Namespaces)
	}
	id, err := r.idCtrl(ctx, ctrl)
	if err != nil {
		return nil, fmt.Errorf("format %s: identify controller: %w", addr, err)
	}
	if id.OACS&2 == 0 {
		return nil, fmt.Errorf("format %s: controller does not support Format NVM (oacs %#x): %w", addr, id.OACS, ErrUnsupported)
	}
	if ses == 2 && id.FNA&4 == 0 {
		return nil, fmt.Errorf("format %s: crypto erase by format not supported (fna %#x): %w", addr, id.FNA, ErrUnsupported)
	}
	// Asked again here, as before a sanitize: with fna bit 0 (or bit 1
	// and a secure erase) the format reaches every controller's
	// namespaces in the subsystem.
	dev.NVMe.CMIC, dev.NVMe.FNA = id.CMIC, id.FNA
	r.subsystemOf(dev)
	if err := SubsystemFormatRefusal(addr, dev.NVMe, ses); err != nil {
		r.log.Warn("format refused: it would reach the shared NVM subsystem's every namespace", "device", addr, "controller", ctrl, "err", err)
		return nil, err
	}
	details, err := r.hiddenNamespaces(ctx, addr, ctrl, id, "format")
	if err != nil {
		return nil, err
	}
	if _, err := r.run.Run(ctx, r.cfg.Tools.NVMe, "format", ns, "-s", strconv.Itoa(ses), "--force"); err != nil {
		return nil, fmt.Errorf("format %s %s -s %d: %w", addr, ns, ses, err)
	}
	return details, nil
}

// CheckHiddenNamespaces is the hidden-namespace check of FormatDetails
// for another erase through addr's controller that claims the whole
// drive: erase ("overwrite") names it in the error and the details. An
// overwrite writes only the block devices of the namespaces attached to
// this controller, so an allocated namespace attached to no controller (a
// tenant's created-then-detached one) would keep its data behind a clean
// record: ErrHiddenNamespaces, before anything is written. The rules and
// the details are FormatDetails' (nil details: no namespace management,
// nothing to check).
func (r *Real) CheckHiddenNamespaces(ctx context.Context, addr Address, erase string) (map[string]any, error) {
	_, ctrl, err := r.nvmeCtrl(ctx, addr)
	if err != nil {
		return nil, err
	}
	id, err := r.idCtrl(ctx, ctrl)
	if err != nil {
		return nil, fmt.Errorf("%s %s: identify controller (for namespace management, oacs bit 3): %w", erase, addr, err)
	}
	return r.hiddenNamespaces(ctx, addr, ctrl, id, erase)
}

// hiddenNamespaces runs the check id's oacs and cmic call for (see
// FormatDetails) before erase.
func (r *Real) hiddenNamespaces(ctx context.Context, addr Address, ctrl string, id *IDCtrl, erase string) (map[string]any, error) {
	switch {
	case id.OACS&8 == 0:
		// No namespace management: nothing can be allocated and detached.
		return nil, nil
	case id.CMIC&2 != 0:
		return r.multiControllerNamespaces(ctx, addr, ctrl, id.CMIC, erase)
	default:
		if err := r.noHiddenNamespaces(ctx, addr, ctrl, erase); err != nil {
			return nil, err
		}
		return map[string]any{HiddenNamespacesCheckedKey: true}, nil
	}
}

// noHiddenNamespaces fails when the subsystem of ctrl has allocated
// namespaces (`nvme list-ns --all`, CNS 10h) that are not active on ctrl
// (`nvme list-ns`, CNS 02h). A controller with namespace management (oacs
// bit 3) lets a tenant create a namespace, write it and detach it; a
// format reaches only the attached ones, so the drive must not be called
// clean. Only meaningful on a single-controller subsystem: the caller
// checks cmic. Either listing failing is an error without
// ErrHiddenNamespaces (retried later, the device stays reserved): CNS 10h
// is mandatory for a controller that supports namespace management, so
// a failure is a transient tool or controller error, and formatting
// without the check could leave a tenant's namespace behind a clean record.
func (r *Real) noHiddenNamespaces(ctx context.Context, addr Address, ctrl, erase string) error {
	hidden, err := r.notAttachedHere(ctx, addr, ctrl, erase)
	if err != nil || len(hidden) == 0 {
		return err
	}
	return fmt.Errorf("%s %s: NSIDs %s are allocated but not attached to %s, the only controller of its subsystem (cmic bit 1 clear), and %s cannot reach them (a tenant may have created and detached them): nothing was erased; delete them (nvme delete-ns /dev/%s -n <nsid>) or attach them to %s so the erase covers them, or erase the drive with nvme-sanitize, then release the device: %w",
		erase, addr, strings.Join(hidden, ", "), ctrl, article(erase), ctrl, ctrl, ErrHiddenNamespaces)
}

// multiControllerNamespaces is the hidden-namespace check on a subsystem
// that may have several controllers (cmic bit 1): a namespace allocated
// but not attached to ctrl may be attached to another controller (a PF's,
// the other port's), which is not this device's to format; one attached
// to no controller at all is hidden (a tenant may have created and
// detached it) and refuses the format. Which controllers hold a namespace
// comes from Identify's attached controller list (`nvme list-ctrl -n`).
// When a list cannot be read, nothing is erased and the error is
// transient (retried, the device stays reserved): erasing without the
// check could leave a tenant's detached namespace behind a clean record.
func (r *Real) multiControllerNamespaces(ctx context.Context, addr Address, ctrl string, cmic int, erase string) (map[string]any, error) {
	unchecked := func(why error) error {
		r.log.Warn(erase+": hidden namespace check could not be made on a multi-controller subsystem: not erasing", "device", addr, "controller", ctrl, "cmic", cmic, "err", why)
		return fmt.Errorf("%s %s: the NVM subsystem of %s may have several controllers (cmic %#x), and which controllers hold its namespaces could not be read, so whether it holds a namespace attached to no controller (a tenant's created-then-detached one, which %s cannot reach) is unknown: nothing was erased; the device stays reserved and this is retried. "+
			"If it persists, make `nvme list-ns --all` and `nvme list-ctrl -n` work for the drive (nvme-cli version, controller firmware), or delete or attach such namespaces: %w", erase, addr, ctrl, cmic, article(erase), why)
	}
	candidates, err := r.notAttachedHere(ctx, addr, ctrl, erase)
	if err != nil {
		return nil, unchecked(err)
	}
	var hidden, elsewhere []string
	for _, nsid := range candidates {
		n, err := r.attachedControllers(ctx, ctrl, nsid)
		if err != nil {
			return nil, unchecked(err)
		}
		if n == 0 {
			hidden = append(hidden, nsid)
		} else {
			elsewhere = append(elsewhere, nsid)
		}
	}
	if len(hidden) > 0 {
		return nil, fmt.Errorf("%s %s: NSIDs %s are allocated in the subsystem of %s but attached to no controller, and %s cannot reach them (a tenant may have created and detached them): nothing was erased; delete them (nvme delete-ns /dev/%s -n <nsid>) or attach them to %s so the erase covers them, then release the device: %w",
			erase, addr, strings.Join(hidden, ", "), ctrl, article(erase), ctrl, ctrl, ErrHiddenNamespaces)
	}
	details := map[string]any{HiddenNamespacesCheckedKey: true}
	if len(elsewhere) > 0 {
		details[HiddenNamespacesNoteKey] = fmt.Sprintf("NSIDs %s are attached to other controllers of the subsystem, not to %s: not this device's, not reached by the %s", strings.Join(elsewhere, ", "), ctrl, erase)
	}
	return details, nil
}

// article is "a format", "an overwrite".
func article(erase string) string {
	if strings.ContainsRune("aeiou", rune(erase[0])) {
		return "an " + erase
	}
	return "a " + erase
}

// attachedControllers is how many controllers namespace nsid is attached
// to: `nvme list-ctrl /dev/<ctrl> --namespace-id=<n>`, whose first line
// is "num of ctrls present: N".
func (r *Real) attachedControllers(ctx context.Context, ctrl, nsid string) (int, error) {
	n, err := strconv.ParseUint(nsid, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("namespace id %q: %w", nsid, err)
	}
	out, err := r.run.Run(ctx, r.cfg.Tools.NVMe, "list-ctrl", "/dev/"+ctrl, "--namespace-id="+strconv.FormatUint(n, 10))
	if err != nil {
		return 0, fmt.Errorf("controllers of namespace %s: %w", nsid, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "num of ctrls present" {
			c, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("controllers of namespace %s: %q: %w", nsid, line, err)
			}
			return c, nil
		}
	}
	return 0, fmt.Errorf("controllers of namespace %s: no \"num of ctrls present\" in nvme list-ctrl's answer %q", nsid, out)
}

// notAttachedHere lists the NSIDs allocated in ctrl's subsystem (`nvme
// list-ns --all`) but not active on ctrl (`nvme list-ns`), sorted.
func (r *Real) notAttachedHere(ctx context.Context, addr Address, ctrl, erase string) ([]string, error) {
	list := func(args ...string) (map[string]bool, error) {
		out, err := r.run.Run(ctx, r.cfg.Tools.NVMe, append([]string{"list-ns", "/dev/" + ctrl}, args...)...)
		if err != nil {
			return nil, fmt.Errorf("%s %s: list namespaces (namespace management is on, oacs bit 3): %w", erase, addr, err)
		}
		ids := map[string]bool{}
		for _, m := range listNSEntry.FindAll(out, -1) {
			_, id, _ := strings.Cut(string(m), ":")
			ids[strings.ToLower(strings.TrimSpace(id))] = true
		}
		return ids, nil
	}
	active, err := list()
	if err != nil {
		return nil, err
	}
	allocated, err := list("--all")
	if err != nil {
		return nil, err
	}
	var out []string
	for id := range allocated {
		if !active[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Media lists addr's namespace block devices with sizes from sysfs.
func (r *Real) Media(ctx context.Context, addr Address) ([]Media, error) {
	dev, _, err := r.nvmeCtrl(ctx, addr)
	if err != nil {
		return nil, err
	}
	var out []Media
	for _, ns := range dev.NVMe.Namespaces {
		size, err := r.fs.BlockSize(filepath.Base(ns))
		if err != nil {
			return nil, fmt.Errorf("media of %s: size of %s: %w", addr, ns, err)
		}
		out = append(out, Media{Path: ns, Size: size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("media of %s: controller has no namespaces: %w", addr, ErrUnsupported)
	}
	return out, nil
}

// FlashFirmware runs `devlink dev flash pci/<addr> file <path> [component <c>]`.
// The kernel loads <path> relative to its firmware search path; the
// caller has checked the SHA-256 of FirmwareFile(<path>), the file that
// search picks. The new version
// usually runs only after a reset.
func (r *Real) FlashFirmware(ctx context.Context, addr Address, img FirmwareImage, p Progress) error {
	if err := CheckFirmwareName(img.Path); err != nil {
		return fmt.Errorf("flash firmware on %s: %w", addr, err)
	}
	args := []string{"dev", "flash", "pci/" + string(addr), "file", img.Path}
	if img.Component != "" {
		args = append(args, "component", img.Component)
	}
	if p != nil {
		p(0)
	}
	if _, err := r.run.Run(ctx, r.cfg.Tools.Devlink, args...); err != nil {
		return fmt.Errorf("flash firmware %s on %s: %w", img.Path, addr, err)
	}
	if p != nil {
		p(1)
	}
	return nil
}

// ActivateFirmware runs `devlink dev reload pci/<addr> action fw_activate`,
// which makes a flashed image run (the device resets; its driver
// re-initialises it). NVMe is not activated this way: ErrUnsupported.
func (r *Real) ActivateFirmware(ctx context.Context, addr Address) error {
	p, err := r.fs.PCIDevice(addr)
	if err != nil {
		return err
	}
	if k := KindFromClass(p.Class); k == KindNVMe {
		return fmt.Errorf("activate firmware on %s: devlink fw_activate does not apply to NVMe: %w", addr, ErrUnsupported)
	}
	if _, err := r.run.Run(ctx, r.cfg.Tools.Devlink, "dev", "reload", "pci/"+string(addr), "action", "fw_activate"); err != nil {
		return fmt.Errorf("activate firmware on %s (devlink dev reload action fw_activate): %w", addr, err)
	}
	return nil
}

// FirmwareVersions returns devlink's running versions ("fw.version" ->
// "22.31.1014"). For an NVMe device it returns {"fr": <id-ctrl fr>}.
func (r *Real) FirmwareVersions(ctx context.Context, addr Address) (map[string]string, error) {
	p, err := r.fs.PCIDevice(addr)
	if err != nil {
		return nil, err
	}
	if KindFromClass(p.Class) == KindNVMe {
		_, ctrl, err := r.nvmeCtrl(ctx, addr)
		if err != nil {
			return nil, err
		}
		id, err := r.idCtrl(ctx, ctrl)
		if err != nil {
			return nil, fmt.Errorf("firmware of %s: %w", addr, err)
		}
		return map[string]string{"fr": id.FR}, nil
	}
	fw, err := r.firmware(ctx, addr, r.run.Run)
	if err != nil {
		return nil, fmt.Errorf("firmware of %s: %w", addr, err)
	}
	return fw, nil
}

// ResetFunction writes 1 to bus/pci/devices/<addr>/reset.
func (r *Real) ResetFunction(ctx context.Context, addr Address) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.fs.WriteReset(addr)
}

// BindDriver rebinds addr through sysfs and returns the previous driver.
// After a bind to nvme it returns only once the controller is live with
// a block device for each active namespace (waitNVMeReady).
func (r *Real) BindDriver(ctx context.Context, addr Address, driver string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if driver == "" || strings.ContainsAny(driver, "/\n") {
		return "", fmt.Errorf("bind %s: invalid driver name %q", addr, driver)
	}
	prev, err := r.fs.Bind(addr, driver)
	if err != nil && !errors.Is(err, ErrNoDevice) {
		r.log.Error("rebinding device failed", "device", addr, "driver", driver, "previous", prev, "err", err)
	}
	if err == nil && driver == "nvme" && prev != driver {
		err = r.waitNVMeReady(ctx, addr)
	}
	return prev, err
}
