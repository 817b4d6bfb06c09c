// Package runner executes operator-supplied plugins: the only package in
// scour (outside hardware/) that starts processes. A plugin runs without a
// shell, with a minimal environment, in its own process group that is killed
// whole on timeout, with bounded stdout and stderr.
package runner

import (
	"context"
	"errors"
	"fmt"
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
}

// New validates cfg and returns a Runner.
func New(cfg Config) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg}, nil
}

// Version asks the plugin for its protocol versions and negotiates one.
func (r *Runner) Version(ctx context.Context, path string) (string, error) {
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
