package builtin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/pcireset"
	"github.com/scour-project/scour/plugins"
)

// resetEscalator is a backend that can reset with chosen kernel reset
// methods, trying them in order (hardware.Real).
type resetEscalator interface {
	ResetEscalating(ctx context.Context, addr hardware.Address, methods []string) (map[string]any, error)
}

// resetMethods reads args.methods: kernel reset method names, tried in
// order ([flr, bus]: FLR, escalating to a secondary bus reset).
func resetMethods(a map[string]any) ([]string, error) {
	raw, ok := a["methods"]
	if !ok || raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("methods: want a non-empty list of %v", pcireset.Methods)
	}
	out := make([]string, len(list))
	for i, v := range list {
		s, ok := v.(string)
		if !ok || !slices.Contains(pcireset.Methods, s) {
			return nil, fmt.Errorf("methods[%d]: %v is not one of %v", i, v, pcireset.Methods)
		}
		out[i] = s
	}
	return out, nil
}

func checkResetArgs(a map[string]any) error {
	if err := onlyArgs(a, "methods"); err != nil {
		return err
	}
	_, err := resetMethods(a)
	return err
}

func pciReset(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	methods, err := resetMethods(t.Args)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	esc, ok := be.(resetEscalator)
	if methods == nil || !ok {
		// The kernel's own choice (the first method that works), or a
		// backend without reset_method support: say so in the record.
		if err := be.ResetFunction(ctx, t.Device.Address); err != nil {
			return nil, fmt.Errorf("function-level reset of %s: %w", t.Device.Address, err)
		}
		d := map[string]any{"method": "kernel default (sysfs reset)"}
		if methods != nil {
			d["methods_requested"] = methods
		}
		return plugins.OK(d), nil
	}
	d, err := esc.ResetEscalating(ctx, t.Device.Address, methods)
	if err != nil {
		pe := &plugins.Error{Code: plugins.CodeOf(err), Msg: fmt.Sprintf("resetting %s with %v: %v", t.Device.Address, methods, err), Details: d}
		if errors.Is(err, hardware.ErrUnsupported) {
			// Every method was refused before any reset was written.
			pe.Code = plugins.CodeUnsupported
		}
		return nil, pe
	}
	return plugins.OK(d), nil
}
