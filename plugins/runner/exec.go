package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/scour-project/scour/plugins"
)

type output struct {
	result  *plugins.Result
	version *plugins.VersionResult
	stderr  string
}

// exec runs one plugin command and decodes its stdout. Every failure comes
// back as a *plugins.Error naming the plugin and command.
//
// Every result and every error after the start carry the SHA-256 of the
// file as read just before the start: what a record names as the plugin
// that ran, not whatever sits at path when the step ends (hours later).
func (r *Runner) exec(ctx context.Context, path string, cmd plugins.Command, version string, req *plugins.Request, progress func(float64)) (*output, error) {
	var sum string
	fail := func(code int, stderr, format string, args ...any) error {
		return &plugins.Error{Code: code, Msg: fmt.Sprintf("plugin %s %s: ", path, cmd) + fmt.Sprintf(format, args...), Stderr: stderr, SHA256: sum}
	}
	if err := CheckFile(path, r.cfg.Dirs); err != nil {
		return nil, &plugins.Error{Code: plugins.CodeInvalidConfig, Msg: err.Error()}
	}
	stdin, err := stdinFile(req)
	if err != nil {
		return nil, fail(plugins.CodeTryAgainLater, "", "preparing stdin: %v", err)
	}
	defer stdin.Close()
	if sum, err = plugins.FileSHA256(path); err != nil {
		return nil, fail(plugins.CodeInvalidConfig, "", "reading it to record its SHA-256: %v", err)
	}
	// path is its own real path (CheckFile): what runs is what was checked
	// and hashed (only root can replace it meanwhile: CheckFile's rules).
	p, err := start(path, Environ(cmd, version, req), stdin)
	if err != nil {
		// A deployment problem (wrong interpreter, exec format), not the
		// device's: CodeInvalidConfig, so the device is retried, not
		// quarantined.
		return nil, fail(plugins.CodeInvalidConfig, "", "cannot start it: %v: check that it is an executable for this host (its #! interpreter exists)", err)
	}
	stdout := newLimitedLines(r.cfg.MaxStdout, progress)
	stderr := &capped{max: r.cfg.MaxStderr}
	outDone := drain(p.stdout, stdout)
	errDone := drain(p.stderr, stderr)

	waitErr, why := p.wait(ctx, stdout.overflow())
	p.killGroup() // children left behind by a plugin that exited
	p.closeAfter(r.cfg.KillGrace, outDone, errDone)

	errText := stderr.String()
	switch why {
	case stopTimeout:
		return nil, fail(plugins.CodeTimeout, errText, "ran past its deadline; its process group was killed")
	case stopCancelled:
		return nil, fail(plugins.CodeTryAgainLater, errText, "cancelled (%v); its process group was killed", context.Cause(ctx))
	case stopOverflow:
		return nil, fail(plugins.CodeProtocol, errText, "printed more than %d bytes on stdout; killed", r.cfg.MaxStdout)
	}
	exitCode := 0
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		exitCode = ee.ExitCode()
	} else if waitErr != nil {
		return nil, fail(plugins.CodeTryAgainLater, errText, "wait: %v", waitErr)
	}
	out, err := decodeOutput(stdout.Bytes(), exitCode, errText, fail)
	if out != nil && out.result != nil {
		out.result.SHA256 = sum
	}
	if pe := (*plugins.Error)(nil); errors.As(err, &pe) {
		pe.SHA256 = sum // a plugin's own error object
	}
	return out, err
}

type stopReason int

const (
	stopExited stopReason = iota
	stopTimeout
	stopCancelled
	stopOverflow
)

type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *os.File
	done           chan error
}

// start runs path directly (never through a shell) in a new process group,
// with stdin from a file and stdout/stderr on pipes we own, so Wait returns
// when the plugin exits even if a child still holds the pipes.
func start(path string, env []string, stdin *os.File) (*proc, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	c := &exec.Cmd{Path: path, Args: []string{path}, Env: env, Dir: "/",
		Stdin: stdin, Stdout: outW, Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	err = c.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	p := &proc{cmd: c, stdout: outR, stderr: errR, done: make(chan error, 1)}
	go func() { p.done <- c.Wait() }()
	return p, nil
}

func (p *proc) wait(ctx context.Context, overflow <-chan struct{}) (error, stopReason) {
	select {
	case err := <-p.done:
		return err, stopExited
	case <-ctx.Done():
		p.killGroup()
		err := <-p.done
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return err, stopTimeout
		}
		return err, stopCancelled
	case <-overflow:
		p.killGroup()
		return <-p.done, stopOverflow
	}
}

// killGroup SIGKILLs the plugin's whole process group (pgid = its pid).
func (p *proc) killGroup() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// closeAfter waits for both readers to reach EOF, closing the pipes after
// grace so a child that escaped the group cannot block scour.
func (p *proc) closeAfter(grace time.Duration, done ...<-chan struct{}) {
	t := time.NewTimer(grace)
	defer t.Stop()
	for _, d := range done {
		select {
		case <-d:
		case <-t.C:
			p.stdout.Close()
			p.stderr.Close()
			<-d
		}
	}
	p.stdout.Close()
	p.stderr.Close()
}

func stdinFile(req *plugins.Request) (*os.File, error) {
	f, err := os.CreateTemp("", "scour-plugin-stdin-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	if req != nil {
		if err := json.NewEncoder(f).Encode(req); err != nil {
			f.Close()
			return nil, err
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func drain(r io.Reader, w io.Writer) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(w, r)
	}()
	return done
}

// capped keeps the first max bytes written and discards the rest.
// It must not embed bytes.Buffer: io.Copy would use its ReadFrom and
// bypass the cap.
type capped struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (c *capped) Write(b []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(b) > room {
			c.buf.Write(b[:room])
			c.truncated = true
		} else {
			c.buf.Write(b)
		}
	} else if len(b) > 0 {
		c.truncated = true
	}
	return len(b), nil
}

func (c *capped) String() string {
	if c.truncated {
		return c.buf.String() + "\n[stderr truncated]"
	}
	return c.buf.String()
}

// limitedLines keeps stdout up to max bytes, signals overflow once, and
// hands each complete progress line to progress as it arrives.
type limitedLines struct {
	buf      bytes.Buffer
	max      int
	over     chan struct{}
	closed   bool
	progress func(float64)
	line     []byte
}

func newLimitedLines(max int, progress func(float64)) *limitedLines {
	return &limitedLines{max: max, over: make(chan struct{}), progress: progress}
}

func (l *limitedLines) overflow() <-chan struct{} { return l.over }

func (l *limitedLines) Write(b []byte) (int, error) {
	if l.buf.Len()+len(b) > l.max {
		if !l.closed {
			l.closed = true
			close(l.over)
		}
		return len(b), nil
	}
	l.buf.Write(b)
	l.line = append(l.line, b...)
	for {
		i := bytes.IndexByte(l.line, '\n')
		if i < 0 {
			break
		}
		l.emit(l.line[:i])
		l.line = l.line[i+1:]
	}
	return len(b), nil
}

func (l *limitedLines) emit(line []byte) {
	if l.progress == nil {
		return
	}
	if f, ok := progressOf(bytes.TrimSpace(line)); ok {
		l.progress(f)
	}
}

func (l *limitedLines) Bytes() []byte { return l.buf.Bytes() }
