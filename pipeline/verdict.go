package pipeline

import (
	"fmt"
	"time"
)

// Verdict is the one answer a run gives. Only VerdictClean lets the caller
// return the device to the pool.
type Verdict string

const (
	// VerdictClean: every required step succeeded in this run.
	VerdictClean Verdict = "clean"
	// VerdictRetryLater: a recoverable failure with run budget left.
	VerdictRetryLater Verdict = "retry-later"
	// VerdictQuarantine: permanent failure, budget exhausted, or a check
	// said retire. The device stays reserved until an operator acts.
	VerdictQuarantine Verdict = "quarantine"
	// VerdictAborted: Placement no longer showed the device dirty
	// (allocated, in use, un-reserved or quarantined meanwhile) before a
	// destructive step or a retry of one; nothing destructive ran after
	// the check (the reason names attempts that ran before a retry). Not
	// a hardware problem.
	VerdictAborted Verdict = "aborted"
	// VerdictNoProfile: no profile matches the device; it stays reserved
	// and is reported (never cleaned, never returned).
	VerdictNoProfile Verdict = "no-profile"
)

// Result is a run's outcome.
type Result struct {
	Verdict Verdict `json:"verdict"`
	RunID   string  `json:"run_id,omitempty"`
	Device  string  `json:"device"`
	// Serial and Model as last known: from discovery, or from a step's
	// driver when the home driver hides them (NVMe on vfio-pci).
	Serial   string       `json:"serial,omitempty"`
	Model    string       `json:"model,omitempty"`
	Profile  string       `json:"profile,omitempty"`
	Pipeline string       `json:"pipeline,omitempty"`
	Attempt  int          `json:"attempt,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	Step     string       `json:"step,omitempty"` // the step that decided a non-clean verdict
	Code     int          `json:"code,omitempty"`
	Steps    []StepRecord `json:"steps,omitempty"`
	// Retirement, on a quarantine verdict because a step said retire,
	// says whether the retirement wipe erased the device first.
	Retirement *Retirement   `json:"retirement,omitempty"`
	Duration   time.Duration `json:"duration"`
}

// Clean reports whether the device may return to the pool.
func (r *Result) Clean() bool { return r.Verdict == VerdictClean }

func (r *Result) String() string {
	s := fmt.Sprintf("device %s: %s", r.Device, r.Verdict)
	if r.Step != "" {
		s += fmt.Sprintf(" at step %s", r.Step)
	}
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}
