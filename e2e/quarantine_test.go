package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// The claims store, not the Placement trait, is the authority on a
// quarantine: when the trait disappears (Nova's update setting the
// provider's traits to its own set, a failed write, a crash after the
// verdict), the device is not
// cleaned again with a fresh budget; scour puts the trait back. Only
// scourctl placement unquarantine releases it, and then the device is
// cleaned before it returns.
func TestQuarantineSurvivesLostTrait(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	// The trait is lost; the fault is gone too, so a new run would pass
	// and return the device: exactly what must not happen.
	h, runs := quarantinedHost(t, c, addr)
	d := h.Device(addr)
	// Nova's update of the provider: its own traits only, reserved kept.
	c.P.NovaUpdateTraits(t, d)
	if c.Quarantined(t, d) || c.Reserved(t, d) != 1 {
		t.Fatalf("Nova's update: trait %v, reserved %d; want the trait gone, reserved 1", c.Quarantined(t, d), c.Reserved(t, d))
	}
	Eventually(t, 30*time.Second, "quarantine trait restored", func() (bool, string) {
		return c.Quarantined(t, d), fmt.Sprintf("traits %v", c.P.Traits(t, d.UUID))
	})
	if n, _ := aMetric(aMetrics(t, h), "scour_lifecycle_quarantines_restored_total"); n < 1 {
		t.Errorf("scour_lifecycle_quarantines_restored_total = %v after the restore, want >= 1", n)
	}
	Never(t, 5*time.Second, "device quarantined in the store", func() (bool, string) {
		if r := c.Reserved(t, d); r != 1 {
			return true, fmt.Sprintf("returned to the pool (reserved=%d)", r)
		}
		if n := len(h.Records(t, addr)); n != runs {
			return true, fmt.Sprintf("cleaned again: %d records, had %d", n, runs)
		}
		return false, ""
	})

	// The operator's release: recorded in the store, trait removed; the
	// next scan cleans the device and only then returns it.
	out, err := exec.Command(filepath.Join(bins, "scourctl"), "placement", "unquarantine", "--config", h.config, addr).CombinedOutput()
	if err != nil {
		t.Fatalf("scourctl placement unquarantine: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "released the quarantine recorded by run") {
		t.Errorf("unquarantine output does not mention the store release:\n%s", out)
	}
	c.WaitAvailable(t, h, addr, 60*time.Second)
	if !h.MediaZeroed(t, addr) {
		t.Error("device returned after the unquarantine without being wiped")
	}
	if slices.Contains(c.P.Traits(t, d.UUID), "CUSTOM_SCOUR_QUARANTINED") {
		t.Error("quarantine trait still on the returned device")
	}
}

// quarantinedHost adds a host with one NVMe device at addr, boots and
// deletes an instance on it with the simulator failing its sanitize, and
// waits until the device is quarantined; it then removes the fault, so a
// new run would pass and return the device. It returns the host and the
// device's number of cleaning records then.
func quarantinedHost(t *testing.T, c *Cloud, addr string) (*Host, int) {
	t.Helper()
	h := c.AddHost(t, []SimDevice{{Address: addr}})
	d := h.Device(addr)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	h.FaultFile(t, addr, "fail", "sanitize")
	c.Delete(t, h, inst, harness.Versioned)
	Eventually(t, 60*time.Second, "device quarantined", func() (bool, string) {
		return c.Quarantined(t, d), "no quarantine trait; log tail:\n" + tail(h.Logs(), 20)
	})
	runs := len(h.Records(t, addr))
	if err := os.Remove(filepath.Join(h.Dir, "sim", addr, "fail-sanitize")); err != nil {
		t.Fatal(err)
	}
	return h, runs
}
