package hardware

import (
	"context"
	"strings"
	"testing"
)

// TestRealToolVersions: the record names the nvme-cli that ran by its own
// first version line, asked once per process; a tool that cannot say is
// left out rather than guessed.
func TestRealToolVersions(t *testing.T) {
	t.Parallel()
	r := fixtureRunner(t, func(cmd string) ([]byte, error, bool) {
		switch cmd {
		case "nvme version":
			return []byte("nvme version 2.4 (git 2.4+debian)\nlibnvme version 1.3 (git 1.3)\n"), nil, true
		case "devlink -V":
			return nil, &ToolError{Cmd: cmd, ExitCode: 127, Stderr: "not found"}, true
		}
		return nil, nil, false
	})
	b := newTestReal(t, Config{}, r)
	for range 2 {
		got := b.ToolVersions(context.Background(), []string{ToolNVMeCLI, ToolDevlink, "unknown"})
		if len(got) != 1 || got[ToolNVMeCLI] != "nvme version 2.4 (git 2.4+debian)" {
			t.Fatalf("ToolVersions = %v", got)
		}
	}
	if n := strings.Count(strings.Join(r.Calls(), "\n"), "nvme version"); n != 1 {
		t.Errorf("nvme version ran %d times, want once", n)
	}
}
