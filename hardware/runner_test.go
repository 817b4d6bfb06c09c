package hardware

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/internal/testkit"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tool.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecRunner(t *testing.T) {
	// The scripts are written before the parallel tests run: a parallel
	// test forking meanwhile inherits the script's open file until its
	// exec, and exec'ing the script then fails with "text file busy".
	ok, failing := script(t, `echo "args: $*"`), script(t, "echo partial; echo boom >&2; exit 3")
	t.Parallel()
	ctx := context.Background()
	r := ExecRunner{}

	out, err := r.Run(ctx, ok, "a", "b")
	if err != nil || string(out) != "args: a b\n" {
		t.Errorf("ok tool: %q, %v", out, err)
	}

	_, err = r.Run(ctx, "scour-no-such-tool-xyz", "x")
	if !errors.Is(err, ErrToolMissing) {
		t.Errorf("missing tool: %v, want ErrToolMissing", err)
	}

	_, err = r.Run(ctx, failing)
	var te *ToolError
	if !errors.As(err, &te) || te.ExitCode != 3 || strings.TrimSpace(te.Stderr) != "boom" {
		t.Errorf("failing tool: %#v", err)
	}
}

// The tool spawns a child that would sleep for minutes; the deadline must
// kill the child too (the whole process group), not just the shell. The
// deadline passes once the child runs (its pid recorded), not after a
// fixed time a loaded machine may need just to start the shell.
func TestExecRunnerKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	tool := script(t, "sleep 300 &\necho $! > "+pidFile+".tmp\nmv "+pidFile+".tmp "+pidFile+"\nwait\n")
	t.Parallel() // after writing the script: see TestExecRunner
	ctx := testkit.NewDeadline(context.Background())
	ran := make(chan error, 1)
	go func() {
		_, err := ExecRunner{}.Run(ctx, tool)
		ran <- err
	}()
	b := ctx.ExpireOnFile(t, pidFile, ran)
	if err := <-ran; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hanging tool: %v, want deadline exceeded", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL is delivered asynchronously; wait until the child is gone or a zombie.
	for i := 0; ; i++ {
		if !processRunning(pid) {
			break
		}
		if i == 200 {
			t.Fatalf("child %d of the killed tool is still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func processRunning(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Field 3 is the state; a zombie (Z) or dead (X) process no longer runs.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
