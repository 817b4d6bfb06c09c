// Package runner executes operator-supplied plugins: the only package in
// scour (outside hardware/) that starts processes. A plugin runs without a
// shell, with a minimal environment, in its own process group that is killed
// whole on timeout, with bounded stdout and stderr.
package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/scour-project/scour/plugins"
)

// Config bounds what a plugin may do.
type Config struct {
	// Dirs are the only directories plugins run from.
	Dirs []string
	// Timeout applies when the caller's context has no earlier deadline.
	Timeout time.Duration
	// VersionTimeout bounds VERSION and CHECK calls.
	VersionTimeout time.Duration
	// MaxStdout and MaxStderr bound what is read (bytes).
	MaxStdout int
	MaxStderr int
	// KillGrace is how long to wait for pipes to close after the process
	// group was killed (a child that escaped the group may hold them).
	KillGrace time.Duration
}

func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = time.Hour
	}
	if c.VersionTimeout == 0 {
		c.VersionTimeout = 30 * time.Second
	}
	if c.MaxStdout == 0 {
		c.MaxStdout = 1 << 20
	}
	if c.MaxStderr == 0 {
		c.MaxStderr = 64 << 10
	}
	if c.KillGrace == 0 {
		c.KillGrace = 2 * time.Second
	}
}

// Validate reports every problem in c.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Dirs) == 0 {
		errs = append(errs, fmt.Errorf("plugin runner: no plugin directories configured"))
	}
	if c.Timeout < 0 || c.VersionTimeout < 0 || c.MaxStdout < 0 || c.MaxStderr < 0 {
		errs = append(errs, fmt.Errorf("plugin runner: timeouts and limits must not be negative"))
	}
	return errors.Join(errs...)
}

// Runner runs plugins.
type Runner struct {
	cfg Config

	mu sync.Mutex
	// versions holds each plugin's negotiated protocol version with the
	// identity of the file that answered it.
	versions map[string]negotiated
}

type negotiated struct {
	file    fileID
	version string
}

// fileID identifies a file's content as the kernel sees it: a plugin
// rewritten, replaced (renamed over), re-owned or re-moded changes it,
// the ctime at least.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

func statID(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

// New validates cfg and returns a Runner.
func New(cfg Config) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, versions: map[string]negotiated{}}, nil
}

// Version asks the plugin for its protocol versions and negotiates one.
// The answer is kept while the plugin's file stays the same (device,
// inode, size, mtime, ctime), so a step's CHECK and CLEAN do not each
// start the plugin once more to ask; the file's permissions are checked
// every time all the same, and a changed file is asked again.
func (r *Runner) Version(ctx context.Context, path string) (string, error) {
	if err := CheckFile(path, r.cfg.Dirs); err != nil {
		return "", &plugins.Error{Code: plugins.CodeInvalidConfig, Msg: err.Error()}
	}
	id, ok := statID(path)
	if ok {
		r.mu.Lock()
		n, hit := r.versions[path]
		r.mu.Unlock()
		if hit && n.file == id {
			return n.version, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.VersionTimeout)
	defer cancel()
	out, err := r.exec(ctx, path, plugins.CmdVersion, plugins.ProtocolVersion, nil, nil)
	if err != nil {
		return "", err
	}
	if out.version == nil {
		return "", &plugins.Error{Code: plugins.CodeProtocol, Msg: fmt.Sprintf("plugin %s: VERSION printed no supported_versions", path), Stderr: out.stderr}
	}
	v, err := plugins.Negotiate(plugins.SupportedVersions, out.version.SupportedVersions)
	if err != nil {
		pe := plugins.AsError(err)
		pe.Msg = fmt.Sprintf("plugin %s: %s", path, pe.Msg)
		return "", pe
	}
	// Kept only if the file did not change while it answered.
	if after, same := statID(path); ok && same && after == id {
		r.mu.Lock()
		r.versions[path] = negotiated{file: id, version: v}
		r.mu.Unlock()
	}
	return v, nil
}

// Preflight checks that the plugin at path may run (CheckFile) and
// shares a protocol version with scour (VERSION, which must not touch any
// device), so a service can refuse to start on a bad deployment.
func (r *Runner) Preflight(ctx context.Context, path string) error {
	_, err := r.Version(ctx, path)
	return err
}

// Check runs CHECK: can the plugin clean this device? It must not modify it.
func (r *Runner) Check(ctx context.Context, path, version string, req *plugins.Request) (*plugins.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.VersionTimeout)
	defer cancel()
	return r.call(ctx, path, plugins.CmdCheck, version, req, nil)
}

// Clean runs CLEAN, streaming progress lines to progress.
func (r *Runner) Clean(ctx context.Context, path, version string, req *plugins.Request, progress func(float64)) (*plugins.Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
	}
	return r.call(ctx, path, plugins.CmdClean, version, req, progress)
}

func (r *Runner) call(ctx context.Context, path string, cmd plugins.Command, version string, req *plugins.Request, progress func(float64)) (*plugins.Result, error) {
	req.ProtocolVersion = version
	out, err := r.exec(ctx, path, cmd, version, req, progress)
	if err != nil {
		return nil, err
	}
	if out.result == nil {
		return nil, &plugins.Error{Code: plugins.CodeProtocol, Msg: fmt.Sprintf("plugin %s %s: exited 0 without a result", path, cmd), Stderr: out.stderr}
	}
	return out.result, nil
}
