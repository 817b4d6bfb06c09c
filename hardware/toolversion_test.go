package hardware

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRealToolVersions: the record names the nvme-cli that ran by its own
// first version line, asked once per binary: an nvme-cli upgraded while
// scourd runs is asked again, so records never name the old version. A
// tool that cannot say is left out rather than guessed.
func TestRealToolVersions(t *testing.T) {
	t.Parallel()
	nvme := filepath.Join(t.TempDir(), "nvme")
	install := func(content string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(nvme, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(nvme, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	version := "nvme version 2.4 (git 2.4+debian)"
	r := fixtureRunner(t, func(cmd string) ([]byte, error, bool) {
		switch cmd {
		case nvme + " version":
			return []byte(version + "\nlibnvme version 1.3 (git 1.3)\n"), nil, true
		case "devlink -V":
			return nil, &ToolError{Cmd: cmd, ExitCode: 127, Stderr: "not found"}, true
		}
		return nil, nil, false
	})
	b := newTestReal(t, Config{Tools: ToolPaths{NVMe: nvme, Devlink: "devlink"}}, r)
	asked := func() int { return strings.Count(strings.Join(r.Calls(), "\n"), nvme+" version") }
	check := func(want string, runs int) {
		t.Helper()
		got := b.ToolVersions(context.Background(), []string{ToolNVMeCLI, ToolDevlink, "unknown"})
		if len(got) != 1 || got[ToolNVMeCLI] != want {
			t.Fatalf("ToolVersions = %v, want nvme-cli %q", got, want)
		}
		if n := asked(); n != runs {
			t.Fatalf("nvme version ran %d times, want %d", n, runs)
		}
	}
	day := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	install("#!/bin/true\n", day)
	check("nvme version 2.4 (git 2.4+debian)", 1)
	check("nvme version 2.4 (git 2.4+debian)", 1) // cached
	// apt upgrade nvme-cli: a new binary at the same path.
	install("#!/bin/true\n# 2.8\n", day.Add(24*time.Hour))
	version = "nvme version 2.8 (git 2.8+debian)"
	check("nvme version 2.8 (git 2.8+debian)", 2)
	check("nvme version 2.8 (git 2.8+debian)", 2)
}
