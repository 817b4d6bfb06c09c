package builtin

import (
	"context"
	"fmt"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

type escalatingBackend struct {
	*fakehw.Backend
	got []string
	err error
}

func (b *escalatingBackend) ResetEscalating(_ context.Context, _ hardware.Address, methods []string) (map[string]any, error) {
	b.got = methods
	return map[string]any{"method": methods[len(methods)-1]}, b.err
}

func TestPCIResetMethods(t *testing.T) {
	dev := &hardware.Device{Address: "0000:41:00.0", Kind: hardware.KindGPU}
	esc := &escalatingBackend{Backend: &fakehw.Backend{}}
	res, err := run(t, "pci-reset", esc, dev, map[string]any{"methods": []any{"flr", "bus"}})
	if err != nil || res.Details["method"] != "bus" || len(esc.got) != 2 {
		t.Errorf("escalation: %v %v, backend got %v", res, err, esc.got)
	}
	if _, err := run(t, "pci-reset", esc, dev, map[string]any{"methods": []any{"flr", "hot"}}); plugins.CodeOf(err) != plugins.CodeInvalidConfig {
		t.Errorf("unknown method: %v, want invalid config", err)
	}
	// Every method refused (bus reset with a sibling behind the bridge):
	// unsupported, said before any reset, so on_unsupported decides.
	esc.err = fmt.Errorf("refused: %w", hardware.ErrUnsupported)
	if _, err := run(t, "pci-reset", esc, dev, map[string]any{"methods": []any{"bus"}}); plugins.CodeOf(err) != plugins.CodeUnsupported {
		t.Errorf("all refused: %v, want code unsupported", err)
	}
	// A backend without reset_method support resets the kernel's way and
	// the record says so.
	plain := &fakehw.Backend{ResetFunctionF: func(context.Context, hardware.Address) error { return nil }}
	res, err = run(t, "pci-reset", plain, dev, map[string]any{"methods": []any{"flr", "bus"}})
	if err != nil || res.Details["method"] != "kernel default (sysfs reset)" || res.Details["methods_requested"] == nil {
		t.Errorf("fallback: %v %v", res, err)
	}
}
