package sim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/scour-project/scour/hardware"
)

const steps = 10

// rewrite overwrites each file with zeros, or random bytes for a crypto
// erase (the old key is gone: data reads back as noise), in steps,
// reporting progress and honouring ctx between steps.
func (s *Simulator) rewrite(ctx context.Context, media []hardware.Media, random, slow bool, p hardware.Progress) error {
	var total, done int64
	for _, m := range media {
		total += m.Size
	}
	for _, m := range media {
		fh, err := os.OpenFile(m.Path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		chunk := max((m.Size+steps-1)/steps, 1)
		buf := make([]byte, chunk)
		for off := int64(0); off < m.Size; off += chunk {
			if err := s.pause(ctx, slow); err != nil {
				fh.Close()
				return err
			}
			n := min(chunk, m.Size-off)
			if random {
				if _, err := rand.Read(buf[:n]); err != nil {
					fh.Close()
					return err
				}
			} else {
				clear(buf[:n])
			}
			if _, err := fh.WriteAt(buf[:n], off); err != nil {
				fh.Close()
				return err
			}
			done += n
			if p != nil {
				p(float64(done) / float64(total))
			}
		}
		if err := fh.Sync(); err != nil {
			fh.Close()
			return err
		}
		if err := fh.Close(); err != nil {
			return err
		}
	}
	return nil
}

// cleaned advances the wear counter after a cleaning.
func (s *Simulator) cleaned(d *simDev) error {
	_, err := s.update(d, func(st *state) {
		st.PercentUsed += d.cfg.WearPerClean
		st.Cleanings++
	})
	return err
}

// Sanitize rewrites every namespace: zeros for block and overwrite,
// random bytes for crypto. The device's sanicap must list the action.
func (s *Simulator) Sanitize(ctx context.Context, addr hardware.Address, action hardware.SanitizeAction, _ time.Duration, p hardware.Progress) error {
	d, _, err := s.nvme(addr)
	if err != nil {
		return err
	}
	bit := map[hardware.SanitizeAction]int{hardware.SanitizeCrypto: 1, hardware.SanitizeBlock: 2, hardware.SanitizeOverwrite: 4}[action]
	if bit == 0 {
		return fmt.Errorf("sanitize %s: unknown action %q", addr, action)
	}
	if d.cfg.SANICAP&bit == 0 {
		return fmt.Errorf("sanitize %s with %s: controller supports %v: %w", addr, action, hardware.SanitizeMethods(d.cfg.SANICAP), hardware.ErrUnsupported)
	}
	n := &hardware.NVMeInfo{Controller: d.ctrl, CMIC: d.cmic(), SubsystemSanitizeAllowed: s.allowShared(addr)}
	if n.Subsystem, n.OtherControllers, err = s.fs.NVMeSubsystem(d.ctrl); err != nil {
		return fmt.Errorf("sanitize %s: %w", addr, err)
	}
	if err := hardware.SubsystemSanitizeRefusal(addr, n); err != nil {
		return err
	}
	slow, err := s.enter(ctx, d, "sanitize")
	if err != nil {
		return err
	}
	// A sanitize reaches every namespace of the NVM subsystem: those of
	// the controllers sharing it too.
	var media []hardware.Media
	for _, p := range s.subsystemPeers(d) {
		media = append(media, p.mediaFiles()...)
	}
	if err := s.rewrite(ctx, media, action == hardware.SanitizeCrypto, slow, p); err != nil {
		return fmt.Errorf("sanitize %s: %w", addr, err)
	}
	return s.cleaned(d)
}

// Format rewrites one namespace: zeros for ses 1, random for ses 2 (which
// needs fna bit 2). ses 0 is refused as on real hardware. With fna bit 0,
// or bit 1 and a secure erase (always here), it rewrites every namespace
// of the subsystem, and so is refused on a shared one unless allowed.
func (s *Simulator) Format(ctx context.Context, addr hardware.Address, namespace string, ses int) error {
	if ses != 1 && ses != 2 {
		return fmt.Errorf("format %s %s: secure erase setting %d refused: want 1 (user data) or 2 (crypto); 0 erases nothing", addr, namespace, ses)
	}
	d, _, err := s.nvme(addr)
	if err != nil {
		return err
	}
	m, ok := d.namespace(namespace)
	if !ok {
		return fmt.Errorf("format %s: namespace %s is not one of this device's", addr, namespace)
	}
	if *d.cfg.OACS&2 == 0 {
		return fmt.Errorf("format %s: controller does not support Format NVM: %w", addr, hardware.ErrUnsupported)
	}
	if ses == 2 && d.cfg.FNA&4 == 0 {
		return fmt.Errorf("format %s: crypto erase by format not supported (fna %#x): %w", addr, d.cfg.FNA, hardware.ErrUnsupported)
	}
	// As on real hardware: fna bit 0 (any format) or bit 1 (a secure
	// erase) makes the format reach every namespace of the subsystem, so
	// on a shared one it is refused unless the operator allowed it.
	n := &hardware.NVMeInfo{Controller: d.ctrl, CMIC: d.cmic(), FNA: d.cfg.FNA, SubsystemSanitizeAllowed: s.allowShared(addr)}
	if n.Subsystem, n.OtherControllers, err = s.fs.NVMeSubsystem(d.ctrl); err != nil {
		return fmt.Errorf("format %s: %w", addr, err)
	}
	if err := hardware.SubsystemFormatRefusal(addr, n, ses); err != nil {
		return err
	}
	slow, err := s.enter(ctx, d, "format")
	if err != nil {
		return err
	}
	media := []hardware.Media{m}
	if hardware.FormatReachesSubsystem(d.cfg.FNA, ses) {
		media = nil
		for _, p := range s.subsystemPeers(d) {
			media = append(media, p.mediaFiles()...)
		}
	}
	if err := s.rewrite(ctx, media, ses == 2, slow, nil); err != nil {
		return fmt.Errorf("format %s %s: %w", addr, namespace, err)
	}
	return s.cleaned(d)
}

// ScrubGPU zeroes the GPU memory file and reads it back.
func (s *Simulator) ScrubGPU(ctx context.Context, addr hardware.Address, p hardware.Progress) error {
	d, err := s.dev(addr)
	if err != nil {
		return err
	}
	if d.cfg.Kind != hardware.KindGPU {
		return fmt.Errorf("scrub GPU %s: a %s device: %w", addr, d.cfg.Kind, hardware.ErrUnsupported)
	}
	slow, err := s.enter(ctx, d, "scrub-gpu")
	if err != nil {
		return err
	}
	mem := d.mediaFiles()
	if err := s.rewrite(ctx, mem, false, slow, p); err != nil {
		return fmt.Errorf("scrub GPU %s: %w", addr, err)
	}
	if err := verifyZero(mem[0].Path); err != nil {
		return fmt.Errorf("scrub GPU %s: verify: %w", addr, err)
	}
	return nil
}

// verifyZero reads path back and fails at the first non-zero byte.
func verifyZero(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := fh.Read(buf)
		for i := range n {
			if buf[i] != 0 {
				return fmt.Errorf("byte %d of %s is %#x, not zero", off+int64(i), path, buf[i])
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// FirmwareDir stands for the kernel's firmware search path: FlashFirmware
// reads its image names relative to it.
func (s *Simulator) FirmwareDir() string { return filepath.Join(s.cfg.StateDir, "firmware") }

// FlashFirmware "flashes" img: it reads FirmwareDir()/img.Path and stores img.Version
// as pending (devlink component, or fw.version and fw). As on real
// hardware the running version changes only on activation
// (ActivateFirmware; for NVMe also a reset).
func (s *Simulator) FlashFirmware(ctx context.Context, addr hardware.Address, img hardware.FirmwareImage, p hardware.Progress) error {
	d, err := s.dev(addr)
	if err != nil {
		return err
	}
	if d.cfg.Kind != hardware.KindNIC && d.cfg.Kind != hardware.KindNVMe {
		return fmt.Errorf("flash firmware on %s: a %s device: %w", addr, d.cfg.Kind, hardware.ErrUnsupported)
	}
	if img.Version == "" {
		return fmt.Errorf("flash firmware on %s: the simulator needs FirmwareImage.Version to know what %s holds", addr, img.Path)
	}
	slow, err := s.enter(ctx, d, "flash-firmware")
	if err != nil {
		return err
	}
	if err := hardware.CheckFirmwareName(img.Path); err != nil {
		return fmt.Errorf("flash firmware on %s: %w", addr, err)
	}
	if _, err := os.ReadFile(filepath.Join(s.FirmwareDir(), img.Path)); err != nil {
		return fmt.Errorf("flash firmware on %s: %w", addr, err)
	}
	for i := 1; i <= steps; i++ {
		if err := s.pause(ctx, slow); err != nil {
			return err
		}
		if p != nil {
			p(float64(i) / steps)
		}
	}
	_, err = s.update(d, func(st *state) {
		if d.cfg.Kind == hardware.KindNVMe {
			st.Pending = img.Version
			return
		}
		if st.PendingNIC == nil {
			st.PendingNIC = map[string]string{}
		}
		if img.Component != "" {
			st.PendingNIC[img.Component] = img.Version
			return
		}
		st.PendingNIC["fw.version"], st.PendingNIC["fw"] = img.Version, img.Version
	})
	return err
}

// activate makes the pending firmware run.
func activate(st *state) {
	if st.Pending != "" {
		st.Firmware, st.Pending = st.Pending, ""
	}
	for k, v := range st.PendingNIC {
		st.NICFirmware[k] = v
	}
	st.PendingNIC = nil
}

// ActivateFirmware is `devlink dev reload pci/<addr> action fw_activate`:
// the flashed image starts running. Nothing pending: nothing changes.
func (s *Simulator) ActivateFirmware(ctx context.Context, addr hardware.Address) error {
	d, err := s.dev(addr)
	if err != nil {
		return err
	}
	if d.cfg.Kind != hardware.KindNIC {
		return fmt.Errorf("activate firmware on %s: devlink fw_activate is for NICs, not a %s device: %w", addr, d.cfg.Kind, hardware.ErrUnsupported)
	}
	if _, err := s.enter(ctx, d, "activate-firmware"); err != nil {
		return err
	}
	_, err = s.update(d, activate)
	return err
}

// FirmwareVersions returns NIC component versions, or {"fr": ...} for NVMe.
func (s *Simulator) FirmwareVersions(ctx context.Context, addr hardware.Address) (map[string]string, error) {
	d, err := s.dev(addr)
	if err != nil {
		return nil, err
	}
	if _, err := s.enter(ctx, d, "firmware-versions"); err != nil {
		return nil, err
	}
	st, err := s.load(d)
	if err != nil {
		return nil, err
	}
	switch d.cfg.Kind {
	case hardware.KindNVMe:
		return map[string]string{"fr": st.Firmware}, nil
	case hardware.KindNIC:
		out := map[string]string{}
		for k, v := range st.NICFirmware {
			out[k] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("firmware of %s: a %s device: %w", addr, d.cfg.Kind, hardware.ErrUnsupported)
}

// ResetFunction writes the simulated sysfs reset file and counts resets.
func (s *Simulator) ResetFunction(ctx context.Context, addr hardware.Address) error {
	d, err := s.dev(addr)
	if err != nil {
		return err
	}
	if _, err := s.enter(ctx, d, "reset"); err != nil {
		return err
	}
	if err := s.fs.WriteReset(addr); err != nil {
		return err
	}
	return s.countReset(d)
}

// countReset records a reset of d; an NVMe controller reset activates a
// committed firmware image.
func (s *Simulator) countReset(d *simDev) error {
	_, err := s.update(d, func(st *state) {
		st.Resets++
		if d.cfg.Kind == hardware.KindNVMe {
			activate(st)
		}
	})
	return err
}

// ResetEscalating resets with the first of methods the device's
// reset_method lists (the simulated sysfs says flr), as the real backend
// does; it counts the reset like ResetFunction.
func (s *Simulator) ResetEscalating(ctx context.Context, addr hardware.Address, methods []string) (map[string]any, error) {
	d, err := s.dev(addr)
	if err != nil {
		return nil, err
	}
	if _, err := s.enter(ctx, d, "reset"); err != nil {
		return nil, err
	}
	details, err := hardware.ResetEscalating(ctx, s.fs, addr, methods)
	if err != nil {
		return details, err
	}
	return details, s.countReset(d)
}

// BindDriver moves the device to driver (persisted) and returns the
// previous one; an NVMe not bound to nvme has no controller or media.
func (s *Simulator) BindDriver(ctx context.Context, addr hardware.Address, driver string) (string, error) {
	d, err := s.dev(addr)
	if err != nil {
		return "", err
	}
	if _, err := s.enter(ctx, d, "bind"); err != nil {
		return "", err
	}
	var prev string
	_, err = s.update(d, func(st *state) { prev, st.Driver = st.Driver, driver })
	if err != nil {
		return prev, err
	}
	return prev, s.setDriver(d, driver)
}
