package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

func init() {
	register(Spec{
		Name:        "gpu-scrub",
		Destructive: true,
		Does:        "write, zero and read back all the GPU memory the built-in NVIDIA scrubber (over libcuda) can allocate, at least args.min_coverage (else hardware.gpu_scrub.min_coverage, default 0.97) of what CUDA reports, refusing a MIG slice; the record gives the bytes covered and not covered; or run hardware.gpu_scrub_tool",
		Run:         gpuScrub,
		Needs:       map[hardware.DeviceKind]string{hardware.KindGPU: "nvidia"},
		CheckArgs:   checkGPUScrubArgs,
	})
	register(Spec{
		Name:        "pci-reset",
		InDevice:    true,
		Destructive: true,
		Does:        "echo 1 > /sys/bus/pci/devices/<addr>/reset; with args.methods ([flr, bus]) each kernel reset method in turn via reset_method, a bus reset only when the device is alone behind its bridge",
		Run:         pciReset,
		CheckArgs:   checkResetArgs,
	})
	register(Spec{
		Name:        "firmware-flash",
		InDevice:    true,
		Destructive: true,
		Does:        "check /lib/firmware/<args.image> against args.sha256 (or fetch a Glance image, args.image: {glance_id|glance_query}, verify it against Glance's hash and put it under /lib/firmware/scour-images/), read the running versions, devlink dev flash pci/<addr> file <image> [component <c>] (the kernel loads it from /lib/firmware), activate it (args.activate: devlink dev reload pci/<addr> action fw_activate, or a PCI reset), then the running version must equal args.version; a same-version re-flash is recorded as proving no version change",
		Run:         flash,
		Tools:       []string{hardware.ToolDevlink},
		CheckArgs:   checkFlashArgs,
	})
}

func flashImage(a map[string]any) (hardware.FirmwareImage, error) {
	var img hardware.FirmwareImage
	var errs []error
	if ref, ok := glanceFlashRef(a); ok {
		// A Glance image: checked against Glance's hash, staged at run time.
		if _, has := a["sha256"]; has {
			errs = append(errs, errors.New("sha256: only with a local image name (a Glance image is checked against Glance's hash)"))
		}
		img.Version, _ = argString(a, "version", "")
		img.Component, _ = argString(a, "component", "")
		if img.Version == "" {
			errs = append(errs, errors.New("version: required"))
		}
		return img, errors.Join(append(errs, checkGlanceFlashRef(ref))...)
	}
	for _, f := range []struct {
		name string
		dst  *string
		need bool
	}{{"image", &img.Path, true}, {"sha256", &img.SHA256, true}, {"version", &img.Version, true}, {"component", &img.Component, false}} {
		v, err := argString(a, f.name, "")
		if err == nil && v == "" && f.need {
			err = fmt.Errorf("%s: required", f.name)
		}
		errs = append(errs, err)
		*f.dst = v
	}
	if img.Path != "" {
		errs = append(errs, hardware.CheckFirmwareName(img.Path))
	}
	if s := img.SHA256; s != "" {
		if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("sha256: %q is not 64 hex digits", s))
		}
	}
	return img, errors.Join(errs...)
}

func checkFlashArgs(a map[string]any) error {
	_, err := flashImage(a)
	_, aerr := flashActivation(a)
	_, serr := argDuration(a, "settle", 0)
	return errors.Join(onlyArgs(a, "image", "sha256", "version", "component", "activate", "settle"), err, aerr, serr)
}

// Activation methods of firmware-flash.
const (
	activateFW    = "fw_activate" // devlink dev reload action fw_activate
	activateReset = "reset"       // a PCI function reset (NVMe: activates a committed image)
)

func flashActivation(a map[string]any) (string, error) {
	m, err := argString(a, "activate", activateFW)
	if err == nil && m != activateFW && m != activateReset {
		err = fmt.Errorf("activate: %q must be %s or %s", m, activateFW, activateReset)
	}
	return m, err
}

// firmwareDirer is a backend that says where the kernel loads firmware
// from (hardware.DefaultFirmwareDir otherwise).
type firmwareDirer interface {
	FirmwareDir() string
}

// firmwareResolver is a backend that knows which file the kernel loads
// for an image name (the real one: the kernel's whole search path).
type firmwareResolver interface {
	FirmwareFile(name string) (string, error)
}

// firmwareFile is the file devlink dev flash will load for img: its name
// relative to the kernel's firmware search path, not scourd's directory.
func firmwareFile(be hardware.Backend, img hardware.FirmwareImage) (string, error) {
	if r, ok := be.(firmwareResolver); ok {
		return r.FirmwareFile(img.Path)
	}
	dir := hardware.DefaultFirmwareDir
	if d, ok := be.(firmwareDirer); ok {
		dir = d.FirmwareDir()
	}
	return filepath.Join(dir, img.Path), nil
}

// firmwareActivator is a backend that can make a flashed image run
// (devlink dev reload action fw_activate).
type firmwareActivator interface {
	ActivateFirmware(ctx context.Context, addr hardware.Address) error
}

func flash(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	img, err := flashImage(t.Args)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	if ref, ok := glanceFlashRef(t.Args); ok {
		name, file, golden, err := stageGlanceFirmware(ctx, be, t, ref)
		if err != nil {
			return nil, err
		}
		img.Path = name
		return flashChecked(ctx, be, t, img, file, golden.HashValue, golden.Map())
	}
	// Check the image before anything touches the device: a wrong or
	// corrupted image must never be flashed. The file checked is the one
	// the kernel will load for the name devlink is given.
	file, err := firmwareFile(be, img)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "firmware image for %s: %v", t.Device.Address, err)
	}
	sum, err := plugins.FileSHA256(file)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "firmware image %s for %s (devlink dev flash loads it relative to the kernel's firmware path): %v", img.Path, t.Device.Address, err)
	}
	if !strings.EqualFold(sum, img.SHA256) {
		return nil, &plugins.Error{Code: plugins.CodeInvalidConfig,
			Msg:     fmt.Sprintf("firmware image %s has sha256 %s, config says %s: refusing to flash %s (fix the image or the checksum)", file, sum, img.SHA256, t.Device.Address),
			Details: map[string]any{"image": img.Path, "image_file": file, "sha256": sum, "expected_sha256": img.SHA256}}
	}
	return flashChecked(ctx, be, t, img, file, sum, nil)
}

// flashChecked flashes img, whose file the kernel loads (checked already,
// sum its hash), activates it and compares versions. record, when set,
// is the image as the cleaning record names it (a Glance image).
func flashChecked(ctx context.Context, be hardware.Backend, t *Target, img hardware.FirmwareImage, file, sum string, record map[string]any) (*plugins.Result, error) {
	how, err := flashActivation(t.Args)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	settle, err := argDuration(t.Args, "settle", time.Minute)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	act, canActivate := be.(firmwareActivator)
	if how == activateFW && !canActivate {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "%s: this backend cannot activate firmware with devlink fw_activate: use activate: reset", t.Device.Address)
	}
	addr := t.Device.Address
	before, err := be.FirmwareVersions(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("reading firmware versions of %s before flashing: %w", addr, err)
	}
	if err := be.FlashFirmware(ctx, addr, img, t.progress); err != nil {
		return nil, fmt.Errorf("flashing %s onto %s: %w", img.Path, addr, err)
	}
	// A flashed image runs only once activated: comparing versions
	// before that would fail every real upgrade and prove nothing.
	switch how {
	case activateFW:
		err = act.ActivateFirmware(ctx, addr)
	default:
		err = be.ResetFunction(ctx, addr)
	}
	if err != nil {
		return nil, fmt.Errorf("activating firmware %s on %s (%s) after flashing: %w", img.Version, addr, how, err)
	}
	versions, err := settledVersions(ctx, be, addr, settle)
	if err != nil {
		return nil, fmt.Errorf("reading firmware versions of %s after flashing and activating: %w", addr, err)
	}
	details := map[string]any{"image": img.Path, "image_file": file, "version": img.Version, "sha256": sum, "versions": versions, "versions_before": before, "activated_by": how}
	if record != nil {
		delete(details, "sha256")
		details["image"], details["image_name"] = record, img.Path
	}
	if !versionMatches(versions, img) {
		return nil, &plugins.Error{Code: plugins.CodePermanent, Details: details,
			Msg: fmt.Sprintf("after flashing %s and activating it (%s), %s runs firmware %v, want %s%s", img.Path, how, addr, versions, img.Version, componentSuffix(img.Component))}
	}
	if versionMatches(before, img) {
		// The same version ran before: the flash may or may not have
		// written anything; the version cannot tell.
		details["version_change_proven"] = false
		details["note"] = fmt.Sprintf("no version change proven: %s already ran %s before the flash; a same-version re-flash proves nothing about the image having been written", addr, img.Version)
	} else {
		details["version_change_proven"] = true
	}
	return plugins.OK(details), nil
}

// settledVersions reads the running versions, retrying while the device
// re-initialises after activation (devlink info fails meanwhile).
func settledVersions(ctx context.Context, be hardware.Backend, addr hardware.Address, settle time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(settle)
	for {
		v, err := be.FirmwareVersions(ctx, addr)
		if err == nil || time.Now().After(deadline) || errors.Is(err, hardware.ErrUnsupported) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
}

func componentSuffix(c string) string {
	if c == "" {
		return ""
	}
	return " for component " + c
}

// versionMatches checks the named component, or any component when none
// is named.
func versionMatches(versions map[string]string, img hardware.FirmwareImage) bool {
	if img.Component != "" {
		return versions[img.Component] == img.Version
	}
	for _, v := range versions {
		if v == img.Version {
			return true
		}
	}
	return false
}
