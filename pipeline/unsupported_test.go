package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/scour-project/scour/hardware"
)

// on_unsupported: skip covers a built-in's refusal before acting, never an
// unsupported error from the hardware after part of the device was wiped.
func TestSkipOnlyBeforeActing(t *testing.T) {
	cfg := testConfig()
	cfg.Profiles[0].Pipeline.Steps = []Step{{Name: "format", Type: "nvme-format", OnUnsupported: OnUnsupportedSkip}}
	for _, tc := range []struct {
		name string
		oacs int
		want Verdict
	}{
		// Skipped (refused before acting), and then no clean verdict:
		// the pipeline's only erase did not run (unerased).
		{"no format support: skipped", 0, VerdictQuarantine},
		{"second namespace refuses: failed", 0x2, VerdictQuarantine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, cfg)
			h.be.DiscoverF = func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
				d := nvmeDevice(a)
				d.NVMe = &hardware.NVMeInfo{OACS: tc.oacs, Namespaces: []string{"/dev/nvme0n1", "/dev/nvme0n2"}}
				return d, nil
			}
			h.be.FormatF = func(_ context.Context, _ hardware.Address, ns string, _ int) error {
				if ns == "/dev/nvme0n2" {
					return fmt.Errorf("namespace locked: %w", hardware.ErrUnsupported)
				}
				return nil
			}
			if res := h.clean(t, target(1)); res.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.want)
			}
		})
	}
}
