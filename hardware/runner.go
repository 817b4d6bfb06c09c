package hardware

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Runner runs one hardware tool and returns its standard output. This
// package is the only place in scour that runs hardware tools; tests use a
// FakeRunner, production an ExecRunner.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ToolError is a tool that ran and failed.
type ToolError struct {
	Cmd      string // the command line as run
	ExitCode int    // -1 when killed
	Stderr   string // last part of stderr
}

func (e *ToolError) Error() string {
	// The first line carries the error; tools like nvme-cli follow it
	// with their usage text, which would drown the message in logs.
	msg, rest, _ := strings.Cut(strings.TrimSpace(e.Stderr), "\n")
	msg = strings.TrimSpace(msg)
	if msg == "" {
		msg = "no error output"
	}
	if strings.TrimSpace(rest) != "" {
		msg += " (more on stderr)"
	}
	return fmt.Sprintf("%s: exit status %d: %s", e.Cmd, e.ExitCode, msg)
}

// ExecRunner runs tools with os/exec. Each tool gets its own process
// group, and when ctx is cancelled or its deadline passes the whole group
// is killed (SIGKILL), so a tool's children (a shell script's sleep, a
// vendor tool's helper) cannot outlive the step that started them.
type ExecRunner struct {
	// WaitDelay bounds how long Run waits for output pipes after the kill
	// (a grandchild that escaped into another group); default 2s.
	WaitDelay time.Duration
}

var _ Runner = ExecRunner{}

const maxStderr = 4096

// Run runs name with args. A tool not found in PATH wraps ErrToolMissing;
// a non-zero exit is a *ToolError; a cancelled run wraps ctx.Err().
func (r ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmdline := strings.Join(append([]string{name}, args...), " ")
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmdline, errors.Join(ErrToolMissing, err))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: not started: %w", cmdline, err)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Negative pid: the whole process group the tool leads.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = r.WaitDelay
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		return stdout.Bytes(), fmt.Errorf("%s: killed (process group): %w", cmdline, ctx.Err())
	}
	if err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		se := stderr.String()
		if len(se) > maxStderr {
			se = se[len(se)-maxStderr:]
		}
		if code == -1 && se == "" {
			se = err.Error()
		}
		return stdout.Bytes(), &ToolError{Cmd: cmdline, ExitCode: code, Stderr: se}
	}
	return stdout.Bytes(), nil
}

// FakeRunner answers tool runs from a function, for tests. RunF gets the
// command name and args; a nil RunF reports every tool as missing.
type FakeRunner struct {
	RunF  func(ctx context.Context, name string, args ...string) ([]byte, error)
	mu    sync.Mutex
	calls []string
}

// Calls returns every command line run so far, in order.
func (f *FakeRunner) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

var _ Runner = (*FakeRunner)(nil)

func (f *FakeRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	f.calls = append(f.calls, strings.Join(append([]string{name}, args...), " "))
	f.mu.Unlock()
	if f.RunF == nil {
		return nil, fmt.Errorf("%s: %w", name, ErrToolMissing)
	}
	return f.RunF(ctx, name, args...)
}
