package hardware

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// A sanitize reaches every namespace of the NVM subsystem: the real
// backend refuses it, before any sanitize command, when cmic bit 1 says
// the subsystem may have several controllers or sysfs lists another
// controller in it, unless hardware.allow_subsystem_sanitize lists the
// device.
func TestRealSanitizeRefusedOnSharedSubsystem(t *testing.T) {
	t.Parallel()
	multi := multiControllerIDCtrl(t)
	for _, tc := range []struct {
		name          string
		cmic, sibling bool
		allow         bool
		refused       string // in the error; "": the sanitize runs
	}{
		{name: "single controller"},
		{name: "cmic bit 1", cmic: true, refused: "cmic 0x2 has bit 1 set"},
		{name: "another controller in sysfs", sibling: true, refused: "other controllers in nvme-subsys0: nvme1"},
		{name: "allowed by the operator", cmic: true, sibling: true, allow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := sanitizeRunner(t, "sanitize-log-never.json", "sanitize-log-done.json")
			inner := r.RunF
			r.RunF = func(ctx context.Context, name string, args ...string) ([]byte, error) {
				if tc.cmic && strings.Join(append([]string{name}, args...), " ") == "nvme id-ctrl /dev/nvme0 -o json" {
					return []byte(multi), nil
				}
				return inner(ctx, name, args...)
			}
			sys := fakeSys(t)
			for _, c := range []string{"nvme0", "nvme1"} {
				if c == "nvme1" && !tc.sibling {
					continue
				}
				if err := os.MkdirAll(sys.Path("class", "nvme-subsystem", "nvme-subsys0", c), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cfg := Config{SysfsRoot: string(sys)}
			if tc.allow {
				cfg.AllowSubsystemSanitize = []string{"0000:01:00.0"}
			}
			b := newTestReal(t, cfg, r)
			err := b.Sanitize(context.Background(), "0000:01:00.0", SanitizeCrypto, time.Millisecond, nil)
			started := sanitizeStarts(r)
			if tc.refused == "" {
				if err != nil || len(started) != 1 {
					t.Fatalf("sanitize: %v, started %v; want one sanitize", err, started)
				}
				return
			}
			if !errors.Is(err, ErrSharedSubsystem) || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "allow_subsystem_sanitize") {
				t.Fatalf("sanitize on a shared subsystem: %v, want ErrSharedSubsystem saying %q", err, tc.refused)
			}
			if len(started) != 0 {
				t.Fatalf("a refused sanitize ran: %v", started)
			}
			dev, err := b.Discover(context.Background(), "0000:01:00.0")
			if err != nil {
				t.Fatal(err)
			}
			if SubsystemSanitizeRefusal(dev.Address, dev.NVMe) == nil {
				t.Fatalf("discovery does not see the shared subsystem: %+v", dev.NVMe)
			}
		})
	}
}

// multiControllerIDCtrl is the PM9A3's id-ctrl with cmic bit 1 set.
func multiControllerIDCtrl(t *testing.T) string {
	t.Helper()
	multi := strings.Replace(string(fixture(t, "id-ctrl-samsung-pm9a3.json")), `"cmic": 0,`, `"cmic": 2,`, 1)
	if !strings.Contains(multi, `"cmic": 2,`) {
		t.Fatal("fixture has no cmic to change")
	}
	return multi
}

func TestConfigAllowSubsystemSanitizeValidated(t *testing.T) {
	t.Parallel()
	c := Config{AllowSubsystemSanitize: []string{"not-an-address"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "hardware.allow_subsystem_sanitize") {
		t.Fatalf("bad address: %v", err)
	}
}
