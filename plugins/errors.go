package plugins

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/hardware"
)

// Well-known error codes. 0-99 are reserved for scour; plugins use 100 and
// above for their own codes (treated as permanent unless the step's retry
// policy lists them).
const (
	CodeIncompatibleVersion = 1  // no common protocol version
	CodeUnsupported         = 2  // this device cannot be cleaned this way
	CodeInvalidConfig       = 3  // the step's args (or the plugin file) are wrong
	CodeInvalidRequest      = 4  // stdin was not a valid request
	CodeTryAgainLater       = 11 // transient: retry the step later
	CodePermanent           = 12 // permanent failure: quarantine the device
	CodeRetire              = 13 // the device must be retired (worn, broken)
	CodeProtocol            = 14 // the plugin broke the protocol (scour-side)
	CodeTimeout             = 15 // the step ran past its timeout (scour-side)
	// CodePluginMin is the first plugin-specific code.
	CodePluginMin = 100
)

// Error is a failed step: the protocol's {"code","msg","details"} object.
type Error struct {
	Code    int            `json:"code"`
	Msg     string         `json:"msg"`
	Details map[string]any `json:"details,omitempty"`
	// Stderr is what the plugin printed on stderr (bounded); never sent.
	Stderr string `json:"-"`
	// SHA256 is the hex SHA-256 of the plugin's file as the runner read it
	// just before starting it, for a plugin that was started (plugins/runner);
	// never sent.
	SHA256 string `json:"-"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Msg, e.Code) }

// Errorf builds an *Error.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the protocol code of err: its *Error code, or a code derived
// from well-known errors (unsupported -> 2, missing tool or hidden
// namespaces -> 12, deadline -> 15); any other error is transient (11) so it is retried within budget and
// the device stays reserved meanwhile.
func CodeOf(err error) int {
	if err == nil {
		return 0
	}
	var pe *Error
	switch {
	case errors.As(err, &pe):
		return pe.Code
	case errors.Is(err, hardware.ErrUnsupported):
		return CodeUnsupported
	case errors.Is(err, hardware.ErrToolMissing), errors.Is(err, hardware.ErrHiddenNamespaces):
		return CodePermanent
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	default:
		return CodeTryAgainLater
	}
}

// AsError converts any error into an *Error carrying CodeOf(err).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Code: CodeOf(err), Msg: err.Error()}
}

// Retryable reports whether a code is transient by default.
func Retryable(code int) bool { return code == CodeTryAgainLater || code == CodeTimeout }
