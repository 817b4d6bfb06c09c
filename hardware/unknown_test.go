package hardware

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Unknown tells a capability discovery could not read (neither met nor
// unmet) from one the device was seen to lack, on what the real backend
// discovers.
func TestUnknownCapabilities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	discover := func(t *testing.T, cfg Config, addr Address, extra func(cmd string) ([]byte, error, bool)) *Device {
		t.Helper()
		r := fixtureRunner(t, extra)
		inner := r.RunF
		r.RunF = func(ctx context.Context, name string, args ...string) ([]byte, error) {
			if len(args) > 0 && args[0] == "id-ctrl" && cfg.ToolTimeout > 0 {
				<-ctx.Done() // hangs past hardware.tool_timeout
				return nil, fmt.Errorf("nvme id-ctrl: killed: %w", ctx.Err())
			}
			return inner(ctx, name, args...)
		}
		d, err := newTestReal(t, cfg, r).Discover(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	at := func(cfg Config, addr Address, extra func(cmd string) ([]byte, error, bool)) func(*testing.T) *Device {
		return func(t *testing.T) *Device { return discover(t, cfg, addr, extra) }
	}
	hangs := Config{ToolTimeout: 20 * time.Millisecond}
	noSanitize := func(cmd string) ([]byte, error, bool) {
		if cmd != "nvme id-ctrl /dev/nvme0 -o json" {
			return nil, nil, false
		}
		out := regexp.MustCompile(`"sanicap"\s*:\s*\d+`).ReplaceAll(fixture(t, "id-ctrl-samsung-pm9a3.json"), []byte(`"sanicap": 0`))
		return out, nil, true
	}
	eccNA := func(cmd string) ([]byte, error, bool) {
		if !strings.HasPrefix(cmd, "nvidia-smi") {
			return nil, nil, false
		}
		return []byte(strings.Replace(string(fixture(t, "nvidia-smi-a100.csv")), "Enabled", "[N/A]", 1)), nil, true
	}
	missing := func(tool string) func(cmd string) ([]byte, error, bool) {
		return func(cmd string) ([]byte, error, bool) {
			if strings.HasPrefix(cmd, tool) {
				return nil, ErrToolMissing, true
			}
			return nil, nil, false
		}
	}
	for _, tc := range []struct {
		name    string
		dev     func(t *testing.T) *Device
		cap     string
		unknown bool
		why     string
	}{
		{"id-ctrl timed out: sanitize unknown", at(hangs, "0000:01:00.0", nil),
			"nvme.sanitize", true, "nvme id-ctrl timed out"},
		{"id-ctrl timed out: format unknown", at(hangs, "0000:01:00.0", nil),
			"nvme.format", true, "nvme id-ctrl timed out"},
		{"nvme-cli not installed", at(Config{}, "0000:01:00.0", missing("nvme")),
			"nvme.sanitize", true, "not installed"},
		{"bound to vfio-pci", at(Config{}, "0000:02:00.0", nil),
			"nvme.sanitize", true, `bound to "vfio-pci", not nvme`},
		{"controller answered: no sanitize method", at(Config{}, "0000:01:00.0", noSanitize),
			"nvme.sanitize", false, ""},
		{"controller answered: sanitize known", at(Config{}, "0000:01:00.0", nil),
			"nvme.sanitize", false, ""},
		{"pci facts are always known", at(Config{}, "0000:02:00.0", nil),
			"pci.reset", false, ""},
		{"nvidia-smi reports ECC [N/A]", at(Config{}, "0000:41:00.0", eccNA),
			"gpu.ecc", false, ""},
		{"nvidia-smi not installed", at(Config{}, "0000:41:00.0", missing("nvidia-smi")),
			"gpu.ecc", true, "nvidia-smi not installed"},
		{"devlink not installed: every firmware component unknown", at(Config{}, "0000:3b:00.0", missing("devlink")),
			"nic.firmware.fw", true, "devlink dev info not installed"},
		{"devlink answered: a component it did not list is missing", at(Config{}, "0000:3b:00.0", nil),
			"nic.firmware.no-such-component", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.dev(t)
			why, unknown := d.Unknown(tc.cap)
			if unknown != tc.unknown || !strings.Contains(why, tc.why) {
				t.Fatalf("Unknown(%s) = %q, %v; want %v saying %q (absent %v, capabilities %v)", tc.cap, why, unknown, tc.unknown, tc.why, d.Absent, d.Capabilities)
			}
			if !unknown {
				return
			}
			if _, set := d.Capabilities[tc.cap]; set {
				t.Fatalf("%s unknown yet set", tc.cap)
			}
		})
	}
	// The known absences are absences all the same: Absent explains them.
	if d := discover(t, Config{}, "0000:01:00.0", noSanitize); d.Absent["nvme.sanitize"] == "" {
		t.Errorf("no sanitize method: Absent %v, want nvme.sanitize explained", d.Absent)
	}
	var none *Device
	if _, unknown := none.Unknown("nvme.sanitize"); unknown {
		t.Error("a nil device reports unknown capabilities")
	}
}
