package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// scourctl status asks scourd over its admin socket: it shows the running
// step and its progress, and needs neither Placement nor Keystone
// credentials (the config it reads here names an unreachable Placement).
// scourctl rescan makes scourd scan at once.
func TestScourctlStatusThroughAdminSocket(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addr}})
	h.FaultFile(t, addr, "hang", "sanitize") // the step runs until the test ends
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	c.Delete(t, h, inst, harness.Versioned)

	raw, err := os.ReadFile(h.config)
	if err != nil {
		t.Fatal(err)
	}
	noPlacement := filepath.Join(t.TempDir(), "scour.yaml")
	os.WriteFile(noPlacement, regexp.MustCompile(`http://[^"'\s]+`).ReplaceAll(raw, []byte("http://127.0.0.1:1")), 0o600)
	row := regexp.MustCompile(addr + `\s+dirty\s+1/1\s+-\s+-\s+-\s+\S+ \(since \S+\)\s+sanitize\s+0%\s+-`)
	var out string
	Eventually(t, 60*time.Second, "status shows the running sanitize step", func() (bool, string) {
		out, err = scourctl(t, "status", "--config", noPlacement)
		return err == nil && row.MatchString(out), out + "\n" + tail(h.Logs(), 20)
	})
	if strings.Contains(out, "reading Placement and the store directly") {
		t.Errorf("status did not go through scourd's socket:\n%s", out)
	}
	out, err = scourctl(t, "rescan", "--config", noPlacement)
	if err != nil || !strings.Contains(out, "scans now") {
		t.Fatalf("scourctl rescan: %v\n%s", err, out)
	}
	Eventually(t, 10*time.Second, "scourd logs the rescan", func() (bool, string) {
		return strings.Contains(h.Logs(), "rescan asked on the admin socket"), tail(h.Logs(), 20)
	})
}

// scourctl retire keeps a device reserved and uncleaned with its reason
// recorded, clean refuses it, unquarantine releases it; scourctl clean
// reserves an available device and scourd cleans it (logging who asked)
// and returns it.
func TestScourctlRetireAndClean(t *testing.T) {
	t.Parallel()
	const retired, cleaned = "0000:81:00.0", "0000:82:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: retired}, {Address: cleaned}})
	rd, cd := h.Device(retired), h.Device(cleaned)
	c.WaitAvailable(t, h, retired, 30*time.Second)

	out, err := scourctl(t, "retire", retired, "--reason", "RMA ticket 42", "--config", h.config)
	if err != nil || !strings.Contains(out, "is retired") || !strings.Contains(out, "not wiped: none needed") {
		t.Fatalf("scourctl retire: %v\n%s", err, out)
	}
	if !c.Quarantined(t, rd) || c.Reserved(t, rd) != 1 {
		t.Fatal("the retired device is not reserved with the quarantine trait")
	}
	if out, err := scourctl(t, "status", "--config", h.config, "-o", "json", "-c", "address,held"); err != nil ||
		!strings.Contains(out, `"held": "retired by `) || !strings.Contains(out, "RMA ticket 42") {
		t.Errorf("status does not show the retirement's reason: %v\n%s", err, out)
	}
	if out, err := scourctl(t, "clean", retired, "--config", h.config); err == nil || !strings.Contains(out, "quarantined") {
		t.Errorf("clean of a retired device: %v\n%s", err, out)
	}
	if out, err := scourctl(t, "retire", cleaned, "--config", h.config); err == nil || !strings.Contains(out, `"reason" not set`) {
		t.Errorf("retire without --reason: %v\n%s", err, out)
	}

	out, err = scourctl(t, "clean", cleaned, "--config", h.config)
	if err != nil || !strings.Contains(out, "scourd cleans it now") {
		t.Fatalf("scourctl clean: %v\n%s", err, out)
	}
	Eventually(t, 60*time.Second, "the cleaned device has a clean record and is back", func() (bool, string) {
		recs := h.Records(t, cleaned)
		return len(recs) == 1 && c.Reserved(t, cd) == 0, tail(h.Logs(), 20)
	})
	if !strings.Contains(h.Logs(), "operator asked to clean the device") {
		t.Error("scourd did not log the operator's clean request")
	}
	// Scans went by: the retired device was never cleaned.
	if recs := h.Records(t, retired); len(recs) != 0 || c.Reserved(t, rd) != 1 {
		t.Fatalf("the retired device was cleaned (%d records) or released", len(recs))
	}

	out, err = scourctl(t, "unquarantine", retired, "--config", h.config) // the top-level spelling
	if err != nil || !strings.Contains(out, "retired by") || !strings.Contains(out, "RMA ticket 42") {
		t.Fatalf("unquarantine of the retired device: %v\n%s", err, out)
	}
	c.WaitAvailable(t, h, retired, 60*time.Second)
}

// SIGTERM during a step is routine (an upgrade, a reboot): scourd logs
// INFO "run interrupted, will resume" and no ERROR, and the next scourd
// resumes the run to a clean device.
func TestSIGTERMDuringAStepIsNotAnError(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addr}})
	h.FaultFile(t, addr, "hang", "sanitize")
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	c.Delete(t, h, inst, harness.Versioned)
	Eventually(t, 60*time.Second, "the sanitize step runs", func() (bool, string) {
		out, err := scourctl(t, "status", "--config", h.config, "-o", "value", "-c", "step")
		return err == nil && strings.TrimSpace(out) == "sanitize", out
	})
	before := len(h.Logs())
	h.Stop(t)
	stopLogs := h.Logs()[before:]
	if !strings.Contains(stopLogs, "run interrupted, will resume") {
		t.Errorf("no INFO 'run interrupted' at SIGTERM:\n%s", stopLogs)
	}
	for _, l := range strings.Split(stopLogs, "\n") {
		if strings.Contains(l, "level=ERROR") {
			t.Errorf("SIGTERM during a step logged an ERROR: %s", l)
		}
	}
	if err := os.Remove(filepath.Join(h.Dir, "sim", addr, "hang-sanitize")); err != nil {
		t.Fatal(err)
	}
	h.Start(t)
	c.WaitAvailable(t, h, addr, 60*time.Second)
}

// scourctl retire of a device in use: the command returns at once and
// says the wipe follows; nothing runs while the instance holds it (rule
// 2); once released, the retirement run wipes it (its record names the
// operator's retirement and the technique), and it stays reserved and
// quarantined. --no-wipe on another device in use records it NOT WIPED,
// its media untouched.
func TestScourctlRetireWipesADeviceInUse(t *testing.T) {
	t.Parallel()
	const wiped, kept = "0000:81:00.0", "0000:82:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: wiped}, {Address: kept}})
	c.WaitAvailable(t, h, wiped, 30*time.Second)
	c.WaitAvailable(t, h, kept, 30*time.Second)
	i1, i2 := harness.NewUUID(), harness.NewUUID()
	c.Boot(t, h, i1, harness.Legacy, wiped)
	c.Boot(t, h, i2, harness.Legacy, kept)
	out, err := scourctl(t, "retire", wiped, "--reason", "RMA 7", "--config", h.config)
	if err != nil || !strings.Contains(out, "is retired") || !strings.Contains(out, "in use by "+i1) || !strings.Contains(out, "wipes it with its retirement wipe first") {
		t.Fatalf("scourctl retire: %v\n%s", err, out)
	}
	out, err = scourctl(t, "retire", kept, "--reason", "to the shredder", "--no-wipe", "--config", h.config)
	if err != nil || !strings.Contains(out, "NOT WIPED (operator chose --no-wipe)") {
		t.Fatalf("scourctl retire --no-wipe: %v\n%s", err, out)
	}
	if recs := h.Records(t, wiped); len(recs) != 0 {
		t.Fatalf("a run of the retired device while %s holds it: %v", i1, recs)
	}
	c.Delete(t, h, i1, harness.Legacy)
	c.Delete(t, h, i2, harness.Legacy)
	retirement := func(addr string) (map[string]any, string) {
		recs := h.Records(t, addr)
		if len(recs) != 1 {
			return nil, fmt.Sprintf("%d records; log tail:\n%s", len(recs), tail(h.Logs(), 30))
		}
		rt, _ := recs[0]["retirement"].(map[string]any)
		return rt, fmt.Sprint(recs[0]["result"], rt)
	}
	Eventually(t, 90*time.Second, "the retired device wiped and recorded", func() (bool, string) {
		rt, why := retirement(wiped)
		return rt != nil && rt["wiped"] == true && rt["step"] == "scourctl retire" && rt["technique"] != "", why
	})
	Eventually(t, 60*time.Second, "the --no-wipe device recorded NOT WIPED", func() (bool, string) {
		rt, why := retirement(kept)
		note, _ := rt["note"].(string)
		return rt != nil && rt["wiped"] == false && strings.HasPrefix(note, "NOT WIPED (operator chose --no-wipe)"), why
	})
	if !h.MediaZeroed(t, wiped) {
		t.Error("the retired device still holds the tenant's data")
	}
	if h.MediaZeroed(t, kept) {
		t.Error("the --no-wipe device was wiped")
	}
	for _, addr := range []string{wiped, kept} {
		if d := h.Device(addr); c.Reserved(t, d) != 1 || !c.Quarantined(t, d) {
			t.Errorf("%s is not reserved with the quarantine trait after its retirement run", addr)
		}
	}
}
