package e2e

import (
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
