package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPluginTestCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plugins must be root-owned: run as root")
	}
	sh, err := os.ReadFile("../../plugins/examples/shell/zero-media")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "zero-media")
	os.WriteFile(good, sh, 0o755)
	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte("#!/bin/sh\ncase $SCOUR_COMMAND in VERSION) echo '{\"supported_versions\":[\"1.0\"]}';; CHECK) echo '{\"status\":\"ok\"}';; *) echo 'wiping...'; exit 1;; esac\n"), 0o755)
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, sh, 0o755)
	os.Chmod(loose, 0o775)

	simCfg := filepath.Join(dir, "sim.yaml")
	os.WriteFile(simCfg, []byte("hardware:\n  backend: simulated\n  simulator:\n    state_dir: "+filepath.Join(t.TempDir(), "sim")+
		"\n    devices: [{address: \"0000:81:00.0\", kind: nvme, namespaces: 2}]\n"), 0o644)

	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"plugin", "test", good, "--device", "0000:81:00.0", "--media", "2"}, 0, []string{
			"PASS  VERSION: speaks protocol 1.0", "PASS  CHECK: ok", "PASS  CLEAN: ok", "is all zeros after CLEAN", "0 failed"}},
		{[]string{"plugin", "test", "--device", "81:00.0", good, "--media", "0"}, 0, []string{"CHECK: answers unsupported (code 2)", "0 failed"}},
		{[]string{"plugin", "test", broken, "--device", "0000:81:00.0"}, 1, []string{"FAIL  CLEAN", "exited with status 1 and printed no valid JSON"}},
		{[]string{"plugin", "test", loose, "--device", "0000:81:00.0"}, 1, []string{"FAIL  permissions", "writable by group or others"}},
		{[]string{"plugin", "test", good}, 2, nil},
		{[]string{"plugin", "test", good, "--device", "0000:81:00.0", "--sim-config", simCfg}, 0, []string{
			"driver nvme), 2 media", "PASS  CLEAN: ok", "nvme0n2.img is all zeros after CLEAN", "0 failed"}},
	}
	for _, tc := range tests {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", tc.args, code, tc.code, out.String(), errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out.String())
			}
		}
	}
}
