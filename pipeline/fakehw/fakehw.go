// Package fakehw is a hardware.Backend for tests: every method is a
// function field; a nil field returns the zero answer (or ErrUnsupported
// for actions), and every call is recorded.
package fakehw

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/scour-project/scour/hardware"
)

// Backend is a fake hardware.Backend.
type Backend struct {
	DiscoverF         func(ctx context.Context, addr hardware.Address) (*hardware.Device, error)
	SmartLogF         func(ctx context.Context, addr hardware.Address) (*hardware.SmartLog, error)
	SanitizeF         func(ctx context.Context, addr hardware.Address, a hardware.SanitizeAction, poll time.Duration, p hardware.Progress) error
	FormatF           func(ctx context.Context, addr hardware.Address, ns string, ses int) error
	MediaF            func(ctx context.Context, addr hardware.Address) ([]hardware.Media, error)
	ScrubGPUF         func(ctx context.Context, addr hardware.Address, p hardware.Progress) error
	FlashFirmwareF    func(ctx context.Context, addr hardware.Address, img hardware.FirmwareImage, p hardware.Progress) error
	FirmwareVersionsF func(ctx context.Context, addr hardware.Address) (map[string]string, error)
	ActivateFirmwareF func(ctx context.Context, addr hardware.Address) error
	ResetFunctionF    func(ctx context.Context, addr hardware.Address) error
	BindDriverF       func(ctx context.Context, addr hardware.Address, driver string) (string, error)
	// FirmwareDirF says where firmware image names are relative to
	// (nil: hardware.DefaultFirmwareDir).
	FirmwareDirF func() string

	mu    sync.Mutex
	calls []string
}

var _ hardware.Backend = (*Backend)(nil)

func (b *Backend) record(format string, args ...any) {
	b.mu.Lock()
	b.calls = append(b.calls, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// Calls returns every call made so far, formatted "Method addr args".
func (b *Backend) Calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

func unsupported(what string) error { return fmt.Errorf("fake: %s: %w", what, hardware.ErrUnsupported) }

func (b *Backend) Discover(ctx context.Context, addr hardware.Address) (*hardware.Device, error) {
	b.record("Discover %s", addr)
	if b.DiscoverF == nil {
		return &hardware.Device{Address: addr, Kind: hardware.KindGeneric}, nil
	}
	return b.DiscoverF(ctx, addr)
}

func (b *Backend) List(ctx context.Context) ([]hardware.Address, error) { return nil, nil }

func (b *Backend) SmartLog(ctx context.Context, addr hardware.Address) (*hardware.SmartLog, error) {
	b.record("SmartLog %s", addr)
	if b.SmartLogF == nil {
		return nil, unsupported("smart-log")
	}
	return b.SmartLogF(ctx, addr)
}

func (b *Backend) Sanitize(ctx context.Context, addr hardware.Address, a hardware.SanitizeAction, poll time.Duration, p hardware.Progress) error {
	b.record("Sanitize %s %s", addr, a)
	if b.SanitizeF == nil {
		return unsupported("sanitize")
	}
	return b.SanitizeF(ctx, addr, a, poll, p)
}

func (b *Backend) Format(ctx context.Context, addr hardware.Address, ns string, ses int) error {
	b.record("Format %s %s ses=%d", addr, ns, ses)
	if b.FormatF == nil {
		return unsupported("format")
	}
	return b.FormatF(ctx, addr, ns, ses)
}

func (b *Backend) Media(ctx context.Context, addr hardware.Address) ([]hardware.Media, error) {
	b.record("Media %s", addr)
	if b.MediaF == nil {
		return nil, nil
	}
	return b.MediaF(ctx, addr)
}

func (b *Backend) ScrubGPU(ctx context.Context, addr hardware.Address, p hardware.Progress) error {
	b.record("ScrubGPU %s", addr)
	if b.ScrubGPUF == nil {
		return unsupported("gpu scrub")
	}
	return b.ScrubGPUF(ctx, addr, p)
}

func (b *Backend) FlashFirmware(ctx context.Context, addr hardware.Address, img hardware.FirmwareImage, p hardware.Progress) error {
	b.record("FlashFirmware %s %s", addr, img.Path)
	if b.FlashFirmwareF == nil {
		return unsupported("firmware flash")
	}
	return b.FlashFirmwareF(ctx, addr, img, p)
}

// FirmwareDir is FirmwareDirF's answer, or hardware.DefaultFirmwareDir.
func (b *Backend) FirmwareDir() string {
	if b.FirmwareDirF == nil {
		return hardware.DefaultFirmwareDir
	}
	return b.FirmwareDirF()
}

func (b *Backend) FirmwareVersions(ctx context.Context, addr hardware.Address) (map[string]string, error) {
	b.record("FirmwareVersions %s", addr)
	if b.FirmwareVersionsF == nil {
		return nil, unsupported("firmware versions")
	}
	return b.FirmwareVersionsF(ctx, addr)
}

func (b *Backend) ResetFunction(ctx context.Context, addr hardware.Address) error {
	b.record("ResetFunction %s", addr)
	if b.ResetFunctionF == nil {
		return unsupported("reset")
	}
	return b.ResetFunctionF(ctx, addr)
}

func (b *Backend) BindDriver(ctx context.Context, addr hardware.Address, driver string) (string, error) {
	b.record("BindDriver %s %s", addr, driver)
	if b.BindDriverF == nil {
		return "", unsupported("bind driver")
	}
	return b.BindDriverF(ctx, addr, driver)
}

// ActivateFirmware is devlink's fw_activate (an optional Backend method).
func (b *Backend) ActivateFirmware(ctx context.Context, addr hardware.Address) error {
	b.record("ActivateFirmware %s", addr)
	if b.ActivateFirmwareF == nil {
		return unsupported("ActivateFirmware")
	}
	return b.ActivateFirmwareF(ctx, addr)
}
