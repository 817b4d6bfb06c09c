package hardware

import (
	"context"
	"errors"
	"os"
	"testing"
)

// The fixture tree's GPU sits alone behind bridge 0000:40:01.1: without
// FLR among its methods, the escalation ends in a bus reset.
func TestRealResetEscalating(t *testing.T) {
	t.Parallel()
	b := newTestReal(t, Config{}, fixtureRunner(t, nil))
	sel := b.FS().Path("bus/pci/devices/0000:41:00.0/reset_method")
	if _, err := b.ResetEscalating(context.Background(), "0000:41:00.0", []string{"flr", "bus"}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("no reset_method file (kernel before 5.15): %v, want ErrUnsupported", err)
	}
	if err := os.WriteFile(sel, []byte("pm bus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := b.ResetEscalating(context.Background(), "0000:41:00.0", []string{"flr", "bus"})
	if err != nil || d["method"] != "bus" {
		t.Fatalf("escalation: %v, details %v; want a bus reset", err, d)
	}
	if got, _ := os.ReadFile(b.FS().Path("bus/pci/devices/0000:41:00.0/reset")); string(got) != "1" {
		t.Errorf("reset file = %q", got)
	}
}
