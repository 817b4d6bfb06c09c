package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// touchesNothing is a plugin (docs/plugins.md, protocol 1.0) that
// touches nothing and answers CHECK ok and CLEAN with status ok, exit 0
// and details (a JSON object).
func touchesNothing(details string) string {
	return `#!/bin/sh
case "${SCOUR_COMMAND:-}" in
VERSION) echo '{"supported_versions":["1.0"]}'; exit 0 ;;
esac
cat >/dev/null
case "$SCOUR_COMMAND" in
CHECK) echo '{"status":"ok"}' ;;
*) echo '{"status":"ok","details":` + details + `}' ;;
esac
`
}

// lyingVerifier is a verifying plugin that answers CLEAN with status ok
// and exit 0 while its own verification says the check failed: the media
// still hold the tenant's bytes.
var lyingVerifier = touchesNothing(`{"verification":{"method":"read-back of 4 sampled blocks","bytes_read":16384,"expected":"every byte 0x00","result":"failed","mismatch":"byte at offset 0 is 0x5c"}}`)

// standInErase is a destructive plugin that answers CLEAN ok, reporting a
// technique: the erasing step a pipeline must have (a verifying plugin
// erases nothing), standing in for a real erase where a test needs the
// tenant's bytes to stay on the media.
var standInErase = touchesNothing(`{"technique":"none: an e2e stand-in for an erase, writes nothing"}`)

// installPlugin writes a plugin script into a root-owned directory of
// the test's own, as scour's plugin rules want, and returns its path.
func installPlugin(t *testing.T, name, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// withNVMePipeline lets edit change the NVMe profile's pipeline, with the
// plugin at path's directory as plugin_dirs.
func withNVMePipeline(path string, edit func(p map[string]any)) HostOption {
	return func(cfg map[string]any) {
		pl := cfg["pipelines"].(map[string]any)
		pl["plugin_dirs"] = []string{filepath.Dir(path)}
		for _, prof := range pl["profiles"].([]map[string]any) {
			if prof["name"] == "nvme" {
				edit(prof["pipeline"].(map[string]any))
			}
		}
	}
}

// withLyingVerifier replaces the NVMe pipeline's steps by two: a stand-in
// erase that writes nothing (a pipeline must have an erasing step, and a
// verifying plugin is none), then the lying verifier (verifies: true),
// claiming category (clear, or none when ""). Neither touches the media.
func withLyingVerifier(t *testing.T, category string) HostOption {
	t.Helper()
	path := installPlugin(t, "check", lyingVerifier)
	wipe := filepath.Join(filepath.Dir(path), "wipe")
	if err := os.WriteFile(wipe, []byte(standInErase), 0o755); err != nil {
		t.Fatal(err)
	}
	return withNVMePipeline(path, func(p map[string]any) {
		p["name"], p["category"] = "nvme-liar", category
		p["steps"] = []map[string]any{
			{"name": "wipe", "type": "plugin", "path": wipe},
			{"name": "check", "type": "plugin", "path": path, "verifies": true},
		}
	})
}

// Issue 31 item 2: a verifying plugin that reports a failed verification
// with status ok (exit 0) got its device returned to the pool with the
// tenant's data on it, under category clear or none, and a signed record
// saying both "verification: failed" and "returned". The verification is
// part of the step's outcome: in the real Placement the device stays
// reserved and quarantined, and the record says why.
func TestFailedVerificationKeepsDeviceReserved(t *testing.T) {
	t.Parallel()
	for _, category := range []string{"clear", ""} {
		t.Run("category "+category, func(t *testing.T) {
			t.Parallel()
			const addr = "0000:81:00.0"
			c := NewCloud(t)
			h := c.AddHost(t, []SimDevice{{Address: addr}}, withLyingVerifier(t, category))
			d := h.Device(addr)
			inst := harness.NewUUID()
			c.Boot(t, h, inst, harness.Versioned, addr)
			waitClaim(t, h, inst)
			if h.MediaZeroed(t, addr) {
				t.Fatal("the simulated media hold no tenant data before the run: the test proves nothing")
			}
			c.Delete(t, h, inst, harness.Versioned)

			finished := waitLog(t, h, 60*time.Second, `msg="cleaning run finished"`)
			if v := logAttr(finished, "verdict"); v != "quarantine" {
				t.Fatalf("run ended %q, want quarantine: %s\nlog:\n%s", v, finished, tail(h.Logs(), 30))
			}
			Eventually(t, 30*time.Second, "device quarantined in Placement", func() (bool, string) {
				return c.Quarantined(t, d), fmt.Sprintf("traits %v", c.P.Traits(t, d.UUID))
			})
			// The reconciler gets several chances to return it wrongly.
			Never(t, 3*time.Second, "device returned with the tenant's data", func() (bool, string) {
				r := c.Reserved(t, d)
				return r != 1, fmt.Sprintf("reserved=%d, want 1", r)
			})
			if n := countLines(h.Logs(), `msg="device returned to the pool"`); n != 0 {
				t.Errorf("device un-reserved %d times", n)
			}
			if h.MediaZeroed(t, addr) {
				t.Error("media zeroed: the plugin touches nothing, so the test does not show what it claims")
			}

			recs := h.Records(t, addr)
			if len(recs) != 1 {
				t.Fatalf("want 1 finished record, got %d: %v", len(recs), recs)
			}
			rec := recs[0]
			if s := nested(rec, "result", "state"); s != "quarantined" {
				t.Errorf("record state %q, want quarantined", s)
			}
			summary := nested(rec, "result", "summary")
			for _, want := range []string{"step check", "answered ok, but its verification failed: byte at offset 0 is 0x5c", "stays reserved"} {
				if !strings.Contains(summary, want) {
					t.Errorf("record summary lacks %q: %s", want, summary)
				}
			}
			vs, _ := rec["verification"].([]any)
			if len(vs) != 1 {
				t.Fatalf("record verification %v, want the check step's", rec["verification"])
			}
			v := vs[0].(map[string]any)
			if v["name"] != "check" || v["result"] != "failed" || v["outcome"] != "failed" {
				t.Errorf("record verification %v, want check: outcome failed, result failed", v)
			}
		})
	}
}
