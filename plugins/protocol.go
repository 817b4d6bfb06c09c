// Package plugins holds scour's cleaning-step protocol: the JSON a step
// receives and returns, the well-known error codes, and how a failure is
// classified (retry, fail, retire). Executable plugins speak it over
// stdin/stdout (see plugins/runner and docs/plugins.md); built-in steps
// (plugins/builtin) return the same Result and *Error values, so the engine
// has one vocabulary for every step.
package plugins

import (
	"fmt"
	"slices"
)

// ProtocolVersion is the newest protocol version scour speaks.
const ProtocolVersion = "1.0"

// SupportedVersions lists every protocol version scour can talk, newest first.
var SupportedVersions = []string{"1.0"}

// Command is the operation a plugin is asked to perform (SCOUR_COMMAND).
type Command string

const (
	// CmdClean cleans the device. It may be destructive.
	CmdClean Command = "CLEAN"
	// CmdCheck reports whether the plugin can clean this device, without
	// modifying it. An unsupported device answers error code 2.
	CmdCheck Command = "CHECK"
	// CmdVersion prints the protocol versions the plugin speaks.
	CmdVersion Command = "VERSION"
)

// Request is the JSON document a plugin reads on stdin (CLEAN and CHECK).
type Request struct {
	ProtocolVersion string `json:"protocol_version"`
	Step            string `json:"step"`
	Device          Device `json:"device"`
	// ResourceProvider is the Placement resource provider of the device.
	ResourceProvider ResourceProvider `json:"resource_provider"`
	// Previous is the instance that last used the device, when known.
	Previous *Previous `json:"previous,omitempty"`
	// Args are the step's arguments from the operator's config.
	Args map[string]any `json:"args,omitempty"`
}

// Device describes the PCI function to clean, from local discovery.
type Device struct {
	Address         string            `json:"address"`
	Kind            string            `json:"kind"`
	VendorID        string            `json:"vendor_id"`
	DeviceID        string            `json:"device_id"`
	Class           string            `json:"class,omitempty"`
	Driver          string            `json:"driver,omitempty"`
	Model           string            `json:"model,omitempty"`
	Serial          string            `json:"serial,omitempty"`
	Firmware        string            `json:"firmware,omitempty"`
	Capabilities    map[string]any    `json:"capabilities,omitempty"`
	Media           []Media           `json:"media,omitempty"`
	Namespaces      []string          `json:"namespaces,omitempty"`
	Absent          map[string]string `json:"absent,omitempty"`
	ResourceClasses []string          `json:"resource_classes,omitempty"`
}

// Media is a path holding tenant data (a namespace or a simulated file).
type Media struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ResourceProvider identifies the device in Placement.
type ResourceProvider struct {
	UUID string `json:"uuid"`
	Name string `json:"name,omitempty"`
}

// Previous names the last user of the device.
type Previous struct {
	Instance string `json:"instance,omitempty"`
	Project  string `json:"project,omitempty"`
}

// StatusOK is the only success status.
const StatusOK = "ok"

// Result is a successful answer to CLEAN or CHECK.
type Result struct {
	Status   string         `json:"status"`
	Details  map[string]any `json:"details,omitempty"`
	Progress *float64       `json:"progress,omitempty"`
	// Stderr is what the plugin printed on stderr (bounded); never sent.
	Stderr string `json:"-"`
	// SHA256 is the hex SHA-256 of the plugin's file as the runner read it
	// just before starting it (plugins/runner); never sent.
	SHA256 string `json:"-"`
}

// OK returns a success result with details.
func OK(details map[string]any) *Result { return &Result{Status: StatusOK, Details: details} }

// VersionResult is the answer to VERSION.
type VersionResult struct {
	ProtocolVersion   string   `json:"protocol_version"`
	SupportedVersions []string `json:"supported_versions"`
}

// ProgressLine is what a plugin may print, one JSON object per line, before
// its final result.
type ProgressLine struct {
	Progress float64 `json:"progress"`
	Message  string  `json:"message,omitempty"`
}

// Negotiate picks the newest version both sides speak, or fails with an
// incompatible-version *Error.
func Negotiate(ours, theirs []string) (string, error) {
	for _, v := range ours {
		if slices.Contains(theirs, v) {
			return v, nil
		}
	}
	return "", &Error{Code: CodeIncompatibleVersion,
		Msg: fmt.Sprintf("no common protocol version: scour speaks %v, plugin speaks %v", ours, theirs)}
}

// VerificationKey is the details key under which a step that checks the
// result of cleaning (read-back, pattern compare, crypto-erase check)
// reports what it checked; the cleaning record lists such steps under
// "verification", and a purge pipeline needs one that passed.
const VerificationKey = "verification"

// Verification is what a verifying step checked, as the record shows it.
type Verification struct {
	// Method says how: "read-back O_DIRECT, 64 sampled blocks of 4 MiB
	// (first and last included)", "read-back O_DIRECT, every block".
	Method string `json:"method"`
	// BytesRead and Samples are how much was read (Samples 0: all).
	BytesRead int64 `json:"bytes_read"`
	Samples   int   `json:"samples,omitempty"`
	// Expected is what the media had to hold: "every byte 0x00".
	Expected string `json:"expected"`
	// Result is "passed", "failed" or "not-applicable" (nothing can be
	// compared after the run's erase: Reason says why); Mismatch says
	// where it failed.
	Result   string `json:"result"`
	Mismatch string `json:"mismatch,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Map is the verification as a details value.
func (v Verification) Map() map[string]any {
	m := map[string]any{"method": v.Method, "bytes_read": v.BytesRead, "expected": v.Expected, "result": v.Result}
	if v.Samples > 0 {
		m["samples"] = v.Samples
	}
	if v.Mismatch != "" {
		m["mismatch"] = v.Mismatch
	}
	if v.Reason != "" {
		m["reason"] = v.Reason
	}
	return m
}

// TechniqueKey is the details key under which a step that sanitizes says
// which technique it applied, in the terms of IEEE 2883 ("sanitize
// crypto erase", "format NVM, user data erase", "overwrite, 1 pass of
// 0x00"); the record lists them under sanitization.techniques.
const TechniqueKey = "technique"
