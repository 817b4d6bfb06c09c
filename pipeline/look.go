package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/scour-project/scour/hardware"
)

// lookProfile names a profile that would match dev but for requirements
// on capabilities unknown on its current driver (an NVMe on vfio-pci
// shows no nvme.* capability), or "" when there is none, or the device's
// facts are known or remembered anyway.
func (c *Config) lookProfile(t Target, dev *hardware.Device) string {
	if dev.Kind != hardware.KindNVMe || dev.Driver == "nvme" || (dev.NVMe != nil && dev.NVMe.Remembered) {
		return ""
	}
	for _, p := range c.Profiles {
		m := p.Match
		if len(m.Requires) == 0 {
			continue
		}
		unknown := false
		for name := range m.Requires {
			_, absent := dev.Absent[name]
			unknown = unknown || absent
		}
		m.Requires = nil
		if unknown && m.mismatch(t, dev) == "" {
			return p.Name
		}
	}
	return ""
}

// lookOnNVMe binds an NVMe that sits on another driver to nvme for a
// moment, so that discovery learns (and the backend remembers) what a
// profile's requirements ask about, then binds it back and re-discovers
// it. Taking a device off its driver is as disruptive to a guest as a
// wipe: Placement is asked first, and an allocation (or no answer) means
// no look. It returns the device as re-discovered on its own driver, or
// why it did not look.
func (e *Engine) lookOnNVMe(ctx context.Context, t Target, dev *hardware.Device, profile string) (*hardware.Device, string, error) {
	has, err := e.youngAllClear(ctx, t.RPUUID)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("not bound to nvme to read what profile %s requires: Placement could not be asked: %v", profile, err), nil
	case has:
		return nil, fmt.Sprintf("not bound to nvme to read what profile %s requires: Placement no longer shows it dirty", profile), nil
	}
	home := dev.Driver
	e.log.Info("binding device to nvme for a moment to read the capabilities a profile requires", "device", t.Address, "profile", profile, "driver", home)
	_, bindErr := e.be.BindDriver(ctx, t.Address, "nvme")
	if bindErr == nil {
		_, bindErr = e.be.Discover(ctx, t.Address) // the backend remembers what it sees
	}
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if home != "" {
		if _, err := e.be.BindDriver(rctx, t.Address, home); err != nil {
			return nil, "", fmt.Errorf("device %s: binding it back to %s after reading its capabilities on nvme: %w (it stays reserved; check the driver)", t.Address, home, err)
		}
	}
	if bindErr != nil {
		return nil, fmt.Sprintf("binding it to nvme to read what profile %s requires failed: %v", profile, bindErr), nil
	}
	d, err := e.be.Discover(ctx, t.Address)
	if err != nil {
		return nil, "", fmt.Errorf("discovering %s again after reading its capabilities on nvme: %w", t.Address, err)
	}
	return d, "", nil
}

// youngAllClear asks Placement whether rp is in use, as a run's clearNow
// does outside a run: an all-clear counts only when it came less than
// placementAnswerMaxAge after it was asked for (a slow answer, Placement's
// retries), else Placement is asked again, at most maxClearAsks times
// more. HasAllocations never answers from an earlier read.
func (e *Engine) youngAllClear(ctx context.Context, rp string) (bool, error) {
	for asked := 0; ; asked++ {
		at := time.Now()
		has, err := e.alloc.HasAllocations(ctx, rp)
		if err != nil || has {
			return has, err
		}
		if time.Since(at) < e.placementAnswerMaxAge {
			return false, nil
		}
		if asked == maxClearAsks {
			return false, fmt.Errorf("each of its %d all-clears came %s or more after it was asked for: too slow to unbind a device on", maxClearAsks+1, e.placementAnswerMaxAge)
		}
	}
}
