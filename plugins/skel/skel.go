// Package skel makes a Go plugin's main one call:
//
//	func main() { skel.PluginMain(clean, check, []string{"1.0"}) }
//
// It reads SCOUR_COMMAND and stdin, answers VERSION itself, refuses a
// request in a protocol version the plugin does not speak (code 1) or that
// is not valid JSON (code 4), and prints the result or error in the
// protocol's shape with the right exit status. Progress goes to stdout as
// JSON lines before the result.
package skel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"

	"github.com/scour-project/scour/plugins"
)

// Progress reports a fraction 0..1 and an optional message.
type Progress func(fraction float64, message string)

// Func implements CLEAN or CHECK. Return a *plugins.Error to choose the
// code (plugins.CodeTryAgainLater, CodeRetire, 100+...); any other error
// is reported as code 12 (permanent failure).
type Func func(ctx context.Context, req *plugins.Request, progress Progress) (*plugins.Result, error)

// PluginMain runs the plugin and exits the process.
func PluginMain(clean, check Func, versions []string) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := Run(ctx, os.Getenv, os.Stdin, os.Stdout, clean, check, versions)
	stop()
	os.Exit(code)
}

// Run is PluginMain without the process: it returns the exit status.
func Run(ctx context.Context, getenv func(string) string, stdin io.Reader, stdout io.Writer, clean, check Func, versions []string) int {
	out := &lockedWriter{w: stdout}
	cmd := plugins.Command(getenv("SCOUR_COMMAND"))
	switch cmd {
	case plugins.CmdVersion:
		return out.json(plugins.VersionResult{ProtocolVersion: versions[0], SupportedVersions: versions}, 0)
	case plugins.CmdClean, plugins.CmdCheck:
	default:
		return out.fail(plugins.Errorf(plugins.CodeInvalidRequest, "unknown SCOUR_COMMAND %q: want CLEAN, CHECK or VERSION", cmd))
	}
	var req plugins.Request
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		return out.fail(plugins.Errorf(plugins.CodeInvalidRequest, "decoding the request on stdin: %v", err))
	}
	if !slices.Contains(versions, req.ProtocolVersion) {
		return out.fail(plugins.Errorf(plugins.CodeIncompatibleVersion, "protocol version %q not supported (plugin speaks %v)", req.ProtocolVersion, versions))
	}
	f := clean
	if cmd == plugins.CmdCheck {
		f = check
	}
	if f == nil {
		return out.fail(plugins.Errorf(plugins.CodeUnsupported, "%s not implemented by this plugin", cmd))
	}
	res, err := f(ctx, &req, func(fr float64, msg string) {
		out.json(plugins.ProgressLine{Progress: min(max(fr, 0), 1), Message: msg}, 0)
	})
	if err != nil {
		var pe *plugins.Error
		if !errors.As(err, &pe) {
			pe = &plugins.Error{Code: plugins.CodePermanent, Msg: err.Error()}
		}
		return out.fail(pe)
	}
	if res == nil {
		res = plugins.OK(nil)
	}
	res.Status = plugins.StatusOK
	return out.json(res, 0)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) json(v any, code int) int {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"code":%d,"msg":%q}`, plugins.CodePermanent, "encoding result: "+err.Error()))
		code = 1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(append(b, '\n'))
	return code
}

func (l *lockedWriter) fail(e *plugins.Error) int { return l.json(e, 1) }
