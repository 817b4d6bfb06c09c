package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// verifyingPlugin answers CLEAN with status ok and the given details.
func verifyingPlugin(details string) string {
	return "#!/bin/sh\ncase $SCOUR_COMMAND in VERSION) echo '{\"supported_versions\":[\"1.0\"]}'; exit 0;; esac\ncat >/dev/null\n" +
		"case $SCOUR_COMMAND in CHECK) echo '{\"status\":\"ok\"}';; *) echo '{\"status\":\"ok\",\"details\":" + details + "}';; esac\n"
}

// plugin test judges CLEAN's verification as scour does: status ok with a
// failed verification (issue 31 item 2: it passed, 0 failed), or a
// verifying step (--verifies) reporting none, fails.
func TestPluginTestJudgesVerification(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plugins must be root-owned: run as root")
	}
	fakePCI(t)
	dir := t.TempDir()
	write := func(name, details string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(verifyingPlugin(details)), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	liar := write("liar", `{"verification":{"result":"failed"}}`)
	silent := write("silent", `{"bytes":1}`)
	honest := write("honest", `{"verification":{"method":"read-back","bytes_read":4096,"expected":"every byte 0x00","result":"passed"}}`)
	na := write("na", `{"verification":{"method":"none","bytes_read":0,"expected":"nothing","result":"not-applicable","reason":"noise"}}`)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"ok with a failed verification", []string{liar}, 1, []string{"FAIL  CLEAN answered status ok, but its verification failed", "1 failed"}},
		{"same with --verifies", []string{liar, "--verifies"}, 1, []string{"FAIL  CLEAN answered status ok, but its verification failed"}},
		{"verifying step without a verification", []string{silent, "--verifies"}, 1, []string{"reported no details.verification", "1 failed"}},
		{"no verification, not a verifying step", []string{silent}, 0, []string{"0 failed"}},
		{"passed", []string{honest, "--verifies"}, 0, []string{"PASS  CLEAN: verification passed", "0 failed"}},
		{"passed without --verifies", []string{honest}, 0, []string{"--verifies was not given", "0 failed"}},
		{"not applicable", []string{na, "--verifies"}, 0, []string{"WARN  CLEAN: verification not applicable (noise)", "0 failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"plugin", "test", "--device", "0000:81:00.0"}, tc.args...), &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
