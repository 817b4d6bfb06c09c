package hardware

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/hardware/pcireset"
)

// ResetEscalating resets addr with the first of methods (kernel reset
// method names: flr, bus, ...) that works, through sysfs reset_method;
// a secondary bus reset is refused while other devices sit behind the
// same bridge. The details list every attempt, for the record.
func (r *Real) ResetEscalating(ctx context.Context, addr Address, methods []string) (map[string]any, error) {
	return ResetEscalating(ctx, r.fs, addr, methods)
}

// ResetEscalating is Real.ResetEscalating on any sysfs tree (the
// simulator's too, so it selects and validates methods as a kernel does).
func ResetEscalating(ctx context.Context, fs FS, addr Address, methods []string) (map[string]any, error) {
	tried, err := pcireset.Sysfs(fs).Reset(ctx, string(addr), methods)
	d := map[string]any{"attempts": tried}
	if err == nil {
		d["method"] = tried[len(tried)-1].Method
		return d, nil
	}
	if errors.Is(err, pcireset.ErrUnsupported) {
		return d, fmt.Errorf("%w: %w", err, ErrUnsupported)
	}
	return d, err
}
