package hardware

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// DefaultNVMeReadyTimeout bounds the wait for a controller that was just
// bound to nvme to come up with its namespaces.
const DefaultNVMeReadyTimeout = 30 * time.Second

// WithNVMeReadyTimeout sets how long BindDriver waits, after binding a
// device to nvme, for its controller and namespaces (default
// DefaultNVMeReadyTimeout; the caller's context bounds it too).
func WithNVMeReadyTimeout(d time.Duration) Option {
	return func(b *Real) { b.nvmeReady = d }
}

// nvmeReadyPoll is how often the wait looks at sysfs.
const nvmeReadyPoll = 50 * time.Millisecond

// listNSEntry matches a line of `nvme list-ns`: "[   0]:0x1".
var listNSEntry = regexp.MustCompile(`(?m)^\s*\[\s*\d+\]:0x[0-9a-fA-F]+\s*$`)

// waitNVMeReady returns once addr, just bound to nvme, has a controller
// in state "live" and a block device for each namespace the controller
// lists as active. The kernel probes the controller and scans its
// namespaces asynchronously after drivers_probe returns (seen on a real
// kernel: a two-namespace drive had none 0.2 s after the bind), and an
// action started before then finds no media. Running out of time is an
// ordinary error: the step is tried again, nothing is quarantined.
func (r *Real) waitNVMeReady(ctx context.Context, addr Address) error {
	timeout := r.nvmeReady
	if timeout <= 0 {
		timeout = DefaultNVMeReadyTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	want := -1 // active namespaces, once the controller could be asked
	why := "no NVMe controller in sysfs yet"
	for {
		p, err := r.fs.PCIDevice(addr)
		if err != nil {
			return err
		}
		if len(p.NVMeControllers) > 0 {
			ctrl := p.NVMeControllers[0]
			why = r.nvmeNotReady(ctx, addr, ctrl, &want)
			if why == "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("NVMe %s bound to nvme but not ready after %s: %s; try again later, and check dmesg for the controller if it persists", addr, timeout, why)
		case <-time.After(nvmeReadyPoll):
		}
	}
}

// nvmeNotReady says why controller ctrl of addr is not ready yet, or ""
// when it is. *want caches the number of active namespaces.
func (r *Real) nvmeNotReady(ctx context.Context, addr Address, ctrl string, want *int) string {
	if b, err := os.ReadFile(r.fs.devPath(addr, "nvme", ctrl, "state")); err == nil {
		if st := strings.TrimSpace(string(b)); st != "live" {
			return fmt.Sprintf("controller %s is in state %q, not live", ctrl, st)
		}
	}
	if *want < 0 {
		out, err := r.run.Run(ctx, r.cfg.Tools.NVMe, "list-ns", "/dev/"+ctrl)
		if err != nil {
			// Without nvme-cli's answer the count is unknown: the
			// controller being live is all there is to wait for.
			r.log.Warn("nvme list-ns failed: not waiting for namespaces after the bind", "device", addr, "controller", ctrl, "err", err)
			*want = 0
		} else {
			*want = len(listNSEntry.FindAll(out, -1))
		}
	}
	nss, err := r.fs.NVMeNamespaces(addr, ctrl)
	if err != nil {
		return err.Error()
	}
	if len(nss) < *want {
		return fmt.Sprintf("%d of the controller's %d active namespaces have a block device", len(nss), *want)
	}
	return ""
}
