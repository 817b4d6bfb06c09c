package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

func init() {
	register(Spec{
		Name:        "gpu-scrub",
		Destructive: true,
		Does:        "zero all device memory and read it back (built-in NVIDIA scrubber over libcuda, or hardware.gpu_scrub_tool)",
		Run:         gpuScrub,
		CheckArgs:   func(a map[string]any) error { return onlyArgs(a) },
	})
	register(Spec{
		Name:        "pci-reset",
		Destructive: true,
		Does:        "echo 1 > /sys/bus/pci/devices/<addr>/reset; with args.methods ([flr, bus]) each kernel reset method in turn via reset_method, a bus reset only when the device is alone behind its bridge",
		Run:         pciReset,
		CheckArgs:   checkResetArgs,
	})
	register(Spec{
		Name:        "firmware-flash",
		Destructive: true,
		Does:        "check args.image against args.sha256, devlink dev flash pci/<addr> file <image> [component <c>] (or vendor tool), then verify the reported version equals args.version",
		Run:         flash,
		CheckArgs:   checkFlashArgs,
	})
}

func flashImage(a map[string]any) (hardware.FirmwareImage, error) {
	var img hardware.FirmwareImage
	var errs []error
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
	if s := img.SHA256; s != "" {
		if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("sha256: %q is not 64 hex digits", s))
		}
	}
	return img, errors.Join(errs...)
}

func checkFlashArgs(a map[string]any) error {
	_, err := flashImage(a)
	return errors.Join(onlyArgs(a, "image", "sha256", "version", "component"), err)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func flash(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	img, err := flashImage(t.Args)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	// Check the image before anything touches the device: a wrong or
	// corrupted image must never be flashed.
	sum, err := fileSHA256(img.Path)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "firmware image for %s: %v", t.Device.Address, err)
	}
	if !strings.EqualFold(sum, img.SHA256) {
		return nil, &plugins.Error{Code: plugins.CodeInvalidConfig,
			Msg:     fmt.Sprintf("firmware image %s has sha256 %s, config says %s: refusing to flash %s (fix the image or the checksum)", img.Path, sum, img.SHA256, t.Device.Address),
			Details: map[string]any{"image": img.Path, "sha256": sum, "expected_sha256": img.SHA256}}
	}
	if err := be.FlashFirmware(ctx, t.Device.Address, img, t.progress); err != nil {
		return nil, fmt.Errorf("flashing %s onto %s: %w", img.Path, t.Device.Address, err)
	}
	versions, err := be.FirmwareVersions(ctx, t.Device.Address)
	if err != nil {
		return nil, fmt.Errorf("reading firmware versions of %s after flashing: %w", t.Device.Address, err)
	}
	if !versionMatches(versions, img) {
		return nil, &plugins.Error{Code: plugins.CodePermanent,
			Msg:     fmt.Sprintf("after flashing %s, %s reports firmware %v, want %s%s", img.Path, t.Device.Address, versions, img.Version, componentSuffix(img.Component)),
			Details: map[string]any{"versions": versions, "expected": img.Version}}
	}
	return plugins.OK(map[string]any{"version": img.Version, "sha256": sum, "versions": versions}), nil
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
