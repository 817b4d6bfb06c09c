package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// Nova re-creates the provider of a quarantined device (new UUID, same
// name and parent, reserved 0, Nova's traits only) in the real
// Placement: scourd fences the new provider again within a scan
// (reserved = total and the quarantine trait), the store's quarantine
// moves to it (scourctl status shows it held under the new provider, the
// reason naming both), it is counted once, and the device is never
// cleaned or returned, though a clean would now pass.
func TestRecreatedProviderStaysQuarantined(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	// The fault is gone: a new run would pass and return the device,
	// exactly what must not happen.
	h, runs := quarantinedHost(t, c, addr)
	d := h.Device(addr)

	off := h.LogLen()
	old := c.P.RecreateDevice(t, h.Node, d)
	if r, q := c.Reserved(t, d), c.Quarantined(t, d); r != 0 || q {
		t.Fatalf("re-created provider starts reserved=%d quarantine trait %v; want 0 and none, as Nova leaves it", r, q)
	}
	Eventually(t, 30*time.Second, "re-created provider fenced with the quarantine trait", func() (bool, string) {
		r, q := c.Reserved(t, d), c.Quarantined(t, d)
		return r == 1 && q, fmt.Sprintf("reserved=%d, quarantine trait %v; log tail:\n%s", r, q, tail(h.LogsFrom(off), 20))
	})
	warn := fmt.Sprintf("old_rp=%s rp=%s", old, d.UUID)
	if logs := h.LogsFrom(off); !strings.Contains(logs, "its quarantine follows it") || !strings.Contains(logs, warn) {
		t.Errorf("no WARN saying the quarantine follows the re-created provider with %q:\n%s", warn, tail(logs, 30))
	}
	// The store's quarantine is the new provider's: status lists the
	// devices of Placement's tree and reads the store by provider.
	out, err := scourctl(t, "status", "--config", h.config, "-o", "json", "-c", "address,held")
	if err != nil || !strings.Contains(out, `"held": "`) || !strings.Contains(out, "was "+old+", now "+d.UUID) {
		t.Errorf("scourctl status does not show the quarantine held under the re-created provider %s: %v\n%s", d.UUID, err, out)
	}

	Never(t, 5*time.Second, "re-created provider kept quarantined", func() (bool, string) {
		if r, q := c.Reserved(t, d), c.Quarantined(t, d); r != 1 || !q {
			return true, fmt.Sprintf("reserved=%d, quarantine trait %v", r, q)
		}
		if n := len(h.Records(t, addr)); n != runs {
			return true, fmt.Sprintf("cleaned again: %d records, had %d", n, runs)
		}
		return false, ""
	})
	m := aMetrics(t, h)
	if n, _ := aMetric(m, "scour_lifecycle_providers_recreated_total", `knowledge="quarantine"`); n != 1 {
		t.Errorf(`scour_lifecycle_providers_recreated_total{knowledge="quarantine"} = %v after several scans, want 1`, n)
	}
	if n, _ := aMetric(m, "scour_lifecycle_quarantines_orphaned"); n != 0 {
		t.Errorf("scour_lifecycle_quarantines_orphaned = %v with the provider back, want 0", n)
	}
	if strings.Contains(h.LogsFrom(off), "cleaning run started") {
		t.Errorf("a cleaning run started on the re-created provider of a quarantined device:\n%s", tail(h.LogsFrom(off), 30))
	}
}

// An instance is deleted while scourd is stopped, so its device's clean
// is pending, and Nova re-creates the device's provider at reserved 0
// before scourd starts again: scourd fences the new provider, then cleans
// the device (the record names the deleted instance), and only then
// returns it.
func TestRecreatedProviderCleanedBeforeReturn(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addr}})
	d := h.Device(addr)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	Eventually(t, 30*time.Second, "claim recorded", func() (bool, string) {
		return strings.Contains(h.Logs(), "claim recorded"), "no 'claim recorded' in the log yet"
	})
	// A scan that starts after the claim sees the burned device and
	// records its holder and address; the scans counter counts a scan
	// when its Placement read ends, so two more mean one whole scan.
	scans := func() float64 {
		n, _ := aMetric(aMetrics(t, h), "scour_lifecycle_scans_total", `result="ok"`)
		return n
	}
	from := scans()
	Eventually(t, 30*time.Second, "a whole scan after the claim", func() (bool, string) {
		n := scans()
		return n >= from+2, fmt.Sprintf("%v ok scans, had %v", n, from)
	})

	h.Stop(t)
	c.Delete(t, h, inst, harness.Versioned)
	old := c.P.RecreateDevice(t, h.Node, d)
	if r := c.Reserved(t, d); r != 0 {
		t.Fatalf("re-created provider starts reserved=%d; want 0, as Nova leaves it", r)
	}
	off := h.LogLen()
	h.Start(t)

	fence := "device provider was re-created at the same PCI address before scour cleaned the device"
	Eventually(t, 30*time.Second, "re-created provider fenced again", func() (bool, string) {
		return strings.Contains(h.LogsFrom(off), fence), fmt.Sprintf("reserved=%d, no WARN %q; log tail:\n%s", c.Reserved(t, d), fence, tail(h.LogsFrom(off), 20))
	})
	Eventually(t, 60*time.Second, "device cleaned and returned", func() (bool, string) {
		r := c.Reserved(t, d)
		return r == 0 && strings.Contains(h.LogsFrom(off), "cleaning run finished"), fmt.Sprintf("reserved=%d; log tail:\n%s", r, tail(h.LogsFrom(off), 20))
	})
	cleanedFor(t, c, h, addr, inst)

	// Fenced, then cleaned: the re-fence's WARN (naming both providers and
	// the deleted instance) comes before the run starts, and no run
	// started before it.
	logs := h.LogsFrom(off)
	w := strings.Index(logs, fence)
	s := strings.Index(logs, "cleaning run started")
	if w < 0 || s < w {
		t.Errorf("the cleaning run started before the re-created provider was fenced (WARN at %d, run at %d):\n%s", w, s, logs)
	}
	line := logs[w:]
	line, _, _ = strings.Cut(line, "\n")
	for _, want := range []string{"old_rp=" + old, "rp=" + d.UUID, "previous_instance=" + inst, "reserved_found=0"} {
		if !strings.Contains(line, want) {
			t.Errorf("re-fence WARN lacks %s: %s", want, line)
		}
	}
	m := aMetrics(t, h)
	if n, _ := aMetric(m, "scour_lifecycle_providers_recreated_total", `knowledge="tenant"`); n != 1 {
		t.Errorf(`scour_lifecycle_providers_recreated_total{knowledge="tenant"} = %v, want 1`, n)
	}
	if n, _ := aMetric(m, "scour_lifecycle_refences_total", `result="ok"`); n != 1 {
		t.Errorf(`scour_lifecycle_refences_total{result="ok"} = %v, want 1`, n)
	}
}
