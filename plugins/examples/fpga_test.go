package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// standInXbmgmt is a shell stand-in for XRT's xbmgmt: it logs its command
// line, fails `program` when $XBMGMT_FAIL is set (with xbmgmt-like words),
// and writes a platform report naming $XBMGMT_UUID for `examine`.
const standInXbmgmt = `#!/bin/sh
echo "$*" >>"$XBMGMT_LOG"
case "$1" in
program)
	[ -n "${XBMGMT_FAIL:-}" ] && { echo "ERROR: Failed to program base: $XBMGMT_FAIL"; exit 1; }
	echo "Programming shell... done" ;;
examine)
	while [ $# -gt 0 ]; do [ "$1" = --output ] && out=$2; shift; done
	printf '{"devices":[{"platforms":[{"static_region":{"vbnv":"xilinx_u250_gen3x16_base_4","logic_uuid":"%s","interface_uuid":"ifc"}}]}]}\n' "$XBMGMT_UUID" >"$out" ;;
esac
`

func runFPGAXRT(t *testing.T, env ...string) (stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	tool := filepath.Join(dir, "xbmgmt")
	if err := os.WriteFile(tool, []byte(standInXbmgmt), 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "shell.xsabin")
	os.WriteFile(img, []byte("shell"), 0o644)
	cmd := exec.Command("shell/fpga-xrt")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "SCOUR_COMMAND=CLEAN", "SCOUR_PCI_ADDRESS=0000:d8:00.0", "SCOUR_XBMGMT=" + tool,
		"SCOUR_ARG_IMAGE_FILE=" + img, "XBMGMT_LOG=" + filepath.Join(dir, "log"), "XBMGMT_UUID=5d1f1a8c-golden"}, env...)
	cmd.Stdin = strings.NewReader("{}")
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	return o.String(), e.String() + "\nLOG:\n" + string(log), err
}

func TestFPGAXRTExample(t *testing.T) {
	out, stderr, err := runFPGAXRT(t, "SCOUR_ARG_ACTION=program")
	if err != nil {
		t.Fatalf("program: %v\n%s\n%s", err, out, stderr)
	}
	var res struct {
		Status  string         `json:"status"`
		Details map[string]any `json:"details"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Status != "ok" || res.Details["readback_id"] != "5d1f1a8c-golden" {
		t.Errorf("answer %q (%v): want ok with the logic_uuid read back", out, err)
	}
	for _, want := range []string{"program --device 0000:d8:00.0 --base --image ", "examine --device 0000:d8:00.0 --report platform --format JSON --output "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("xbmgmt was not run with %q:\n%s", want, stderr)
		}
	}

	out, stderr, err = runFPGAXRT(t, "SCOUR_ARG_ACTION=program", "XBMGMT_FAIL=card busy")
	if err == nil || !strings.Contains(out, `"code":100`) || !strings.Contains(out, "card busy") || !strings.Contains(stderr, "ERROR: Failed to program base") {
		t.Errorf("failing xbmgmt: err %v, answer %q, stderr %q: want code 100 with the tool's words", err, out, stderr)
	}
	if strings.Contains(stderr, "examine") {
		t.Error("read back after a failed program")
	}

	out, _, err = runFPGAXRT(t, "SCOUR_ARG_ACTION=readback", "XBMGMT_UUID=")
	if err == nil || !strings.Contains(out, "no logic_uuid") {
		t.Errorf("examine without an id: err %v, answer %q", err, out)
	}
}
