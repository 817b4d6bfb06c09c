// Package pcireset resets a PCI function through sysfs with a chosen
// method, escalating through a list: function-level reset first, then a
// secondary bus reset of the link above the device, which also clears
// state an FLR leaves (a public report found GPU state that survived
// VFIO's FLR and was cleared only by a bus reset).
//
// The kernel (5.15+) picks the method from
// /sys/bus/pci/devices/<addr>/reset_method: scour writes the one method,
// writes 1 to reset, and writes the previous list back. A bus reset resets
// everything behind the upstream bridge, so it is refused unless the
// device is the bridge's only child.
package pcireset

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Methods are the kernel's reset method names scour accepts.
var Methods = []string{"flr", "af_flr", "pm", "bus", "device_specific", "acpi"}

// ErrUnsupported: no method of the list can run on this device.
var ErrUnsupported = errors.New("no requested reset method is available for the device")

// Attempt is one method tried.
type Attempt struct {
	Method string `json:"method"`
	Error  string `json:"error,omitempty"` // why it was refused or failed; "" = done
}

// Sysfs is a sysfs root ("/sys", or a fake tree in tests).
type Sysfs string

func (s Sysfs) dev(addr string, elems ...string) string {
	return filepath.Join(append([]string{string(s), "bus/pci/devices", addr}, elems...)...)
}

// Reset tries methods in order until one resets addr. It returns every
// attempt (for the record) and, when none succeeded, an error naming them;
// the error wraps ErrUnsupported when no method could even be tried.
func (s Sysfs) Reset(ctx context.Context, addr string, methods []string) ([]Attempt, error) {
	raw, err := os.ReadFile(s.dev(addr, "reset_method"))
	if err != nil {
		return nil, fmt.Errorf("reset %s: %s unreadable (the kernel needs 5.15+ for a chosen reset method): %v: %w", addr, s.dev(addr, "reset_method"), err, ErrUnsupported)
	}
	enabled := strings.Fields(string(raw))
	var tried []Attempt
	ran := false
	for _, m := range methods {
		if err := ctx.Err(); err != nil {
			return tried, err
		}
		why := s.refusal(addr, m, enabled)
		if why == "" {
			ran = true
			if err := s.resetWith(addr, m, enabled); err != nil {
				why = err.Error()
			}
		}
		tried = append(tried, Attempt{Method: m, Error: why})
		if why == "" {
			return tried, nil
		}
	}
	err = fmt.Errorf("reset %s: every method failed or was refused: %s", addr, describe(tried))
	if !ran {
		err = fmt.Errorf("%w: %w", err, ErrUnsupported)
	}
	return tried, err
}

// refusal says why m cannot be used on addr, or "".
func (s Sysfs) refusal(addr, m string, enabled []string) string {
	if !slices.Contains(enabled, m) {
		return fmt.Sprintf("%s is not among the device's reset methods %v", m, enabled)
	}
	if m != "bus" {
		return ""
	}
	others, err := s.Siblings(addr)
	switch {
	case err != nil:
		return err.Error()
	case len(others) > 0:
		return fmt.Sprintf("secondary bus reset refused: the upstream bridge also has %v behind it, which the reset would hit", others)
	}
	return ""
}

// resetWith selects m, resets, and restores the method list.
func (s Sysfs) resetWith(addr, m string, enabled []string) (err error) {
	sel := s.dev(addr, "reset_method")
	if err := write(sel, m); err != nil {
		return fmt.Errorf("select %s: %w", m, err)
	}
	defer func() {
		if rerr := write(sel, strings.Join(enabled, " ")); rerr != nil && err == nil {
			err = fmt.Errorf("%s reset done, but restoring reset_method %v failed: %w", m, enabled, rerr)
		}
	}()
	if err := write(s.dev(addr, "reset"), "1"); err != nil {
		return fmt.Errorf("%s reset: %w", m, err)
	}
	return nil
}

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// Siblings lists the other PCI functions behind addr's upstream bridge
// (the bridge's other children in the device tree). A device directly on
// a root bus has no bridge to reset: that is an error.
func (s Sysfs) Siblings(addr string) ([]string, error) {
	real, err := filepath.EvalSymlinks(s.dev(addr))
	if err != nil {
		return nil, fmt.Errorf("resolve %s in sysfs: %w", addr, err)
	}
	parent := filepath.Dir(real)
	if !pciAddr.MatchString(filepath.Base(parent)) {
		return nil, fmt.Errorf("secondary bus reset refused: %s sits on root bus %s, there is no bridge above it to reset", addr, filepath.Base(parent))
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, fmt.Errorf("list the devices behind bridge %s: %w", filepath.Base(parent), err)
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); pciAddr.MatchString(n) && n != addr {
			out = append(out, n)
		}
	}
	return out, nil
}

func write(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func describe(tried []Attempt) string {
	parts := make([]string, len(tried))
	for i, a := range tried {
		parts[i] = a.Method + ": " + a.Error
	}
	return strings.Join(parts, "; ")
}
