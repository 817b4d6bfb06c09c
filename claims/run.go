package claims

import (
	"errors"
	"strings"
	"time"
)

// RunState is where a cleaning run stands. RunRunning has no verdict yet.
// RunCleaned is the clean verdict: every required step succeeded, and the
// run waits, still open, for the un-reserve; only a successful un-reserve
// makes it RunReturned. A run that ends cleaned (ended_at set) says in its
// summary why the device was not returned by it. Every other verdict ends
// the run at once. A run with ended_at set is never modified again.
type RunState string

const (
	RunRunning     RunState = "running"
	RunCleaned     RunState = "cleaned"     // every step passed; waiting for (or, when ended, without) the un-reserve
	RunReturned    RunState = "returned"    // cleaned, then un-reserved: the device rejoined the pool
	RunQuarantined RunState = "quarantined" // cleaning or verification failed; device stays reserved
	RunAborted     RunState = "aborted"     // stopped before touching the device (e.g. allocation appeared)
	RunFailed      RunState = "failed"      // a recoverable failure; a later run of the device retries
)

// StepOutcome is how one attempt of a step ended. An empty outcome means the
// attempt is still running (or was when the process died).
type StepOutcome string

const (
	StepOK          StepOutcome = "ok"
	StepFailed      StepOutcome = "failed"
	StepSkipped     StepOutcome = "skipped"
	StepInterrupted StepOutcome = "interrupted" // the process died during the attempt; it was re-run
)

// UnknownTenant stands for the previous instance/project of a device found
// dirty without a claim.
const UnknownTenant = "unknown"

// MaxOutputBytes bounds a step's stored output summary; longer output keeps
// its head and tail.
const MaxOutputBytes = 4096

// RunStart identifies the device and the pipeline of a cleaning run.
type RunStart struct {
	Host     string
	DeviceRP string
	Address  string
	Serial   string
	// SerialSource is where Serial came from: "vpd" (PCI VPD) or "" (the
	// device's driver, e.g. NVMe Identify Controller). Kept in the media
	// column, not in the record; SetRunIdentity resets it to "".
	SerialSource    string
	Model           string
	PrevInstance    string // UnknownTenant when the device was dirty without a claim
	PrevProject     string
	Profile         string // cleaning profile that matched the device
	Pipeline        string
	PipelineVersion string
	PlannedSteps    []string // the pipeline's step names, in order, when the run opened
	Trigger         string   // who or what started it: "instance.delete.end msg 42", "scourctl clean --device ..."
	Media           Media    // what discovery knew of the device's media
	// Category is the sanitization category the pipeline claims: "clear",
	// "purge", "no-erase" (the pipeline erases nothing: a device that holds
	// no tenant data) or "". A clear or purge run is refused a clean
	// verdict unless a step reporting its technique succeeded in it; a
	// purge run also needs a verification step that passed after it.
	Category string
	// ScourVersion is the version of the scour that opened the run.
	ScourVersion string
}

// Media is what a record names about the device's media.
type Media struct {
	Make          string `json:"make,omitempty"` // PCI vendor id, "0x144d"
	Firmware      string `json:"firmware,omitempty"`
	Type          string `json:"media_type,omitempty"` // nvme, gpu, nic, generic
	CapacityBytes int64  `json:"capacity_bytes,omitempty"`
}

// Run is one cleaning of one device.
type Run struct {
	ID string
	// Attempt counts the device's runs since its last returned run,
	// this one included (1 for the first); retry budgets use it.
	Attempt int
	RunStart
	State   RunState
	Summary string
	// CleanedAt is when the clean verdict was stored (nil for other
	// verdicts, and for runs recorded before schema v3).
	CleanedAt *time.Time
	StartedAt time.Time
	EndedAt   *time.Time
}

// Finished reports whether the run has its verdict: its steps are sealed.
func (r Run) Finished() bool { return r.State != RunRunning }

// Closed reports whether the run's record is final (sealed): a finished
// run other than a cleaned one still waiting for its un-reserve.
func (r Run) Closed() bool { return r.EndedAt != nil }

// AwaitingReturn reports a cleaned run whose un-reserve has not happened
// yet: the next clean of the device resumes it instead of starting over.
func (r Run) AwaitingReturn() bool { return r.State == RunCleaned && r.EndedAt == nil }

// StepStart names a step about to run.
type StepStart struct {
	RunID string
	Name  string
	Index int // the step's position in the pipeline, from 0
	// Optional steps may fail without blocking RunReturned; steps are
	// required unless marked.
	Optional bool
	// Verification marks steps that check the result (read-back, pattern
	// verify); the record lists them under "verification".
	Verification bool
}

// Step is one attempt of one step of a run.
type Step struct {
	RunID        string
	Seq          int // order of attempts within the run, from 1
	Name         string
	Index        int // position in the pipeline (-1: recorded before schema v2)
	Attempt      int // attempts of this step name within the run, from 1
	Optional     bool
	Verification bool
	StartedAt    time.Time
	EndedAt      *time.Time
	Outcome      StepOutcome
	Output       string         // bounded summary (message)
	Code         int            // the step's result code (plugin protocol), 0 when none
	Details      map[string]any // structured result, bounded when stored
	Stderr       string         // bounded tail of the step's diagnostics
	Progress     int            // percent, 0..100
}

// StepResult is how an attempt ended, for StepFinished.
type StepResult struct {
	Outcome StepOutcome
	Output  string
	Code    int
	Details map[string]any
	Stderr  string
}

// Done reports whether the attempt completed successfully (ok or skipped).
func (s Step) Done() bool { return s.Outcome == StepOK || s.Outcome == StepSkipped }

// Errors callers can test with errors.Is.
var (
	ErrNoRun       = errors.New("no such cleaning run")
	ErrRunFinished = errors.New("cleaning run already finished")
	ErrNoStep      = errors.New("no such step attempt")
	ErrNotClean    = errors.New("cleaning run has steps that did not succeed")
	ErrNotCleaned  = errors.New("cleaning run is not cleaned and waiting for its un-reserve")
)

// boundOutput keeps the head and tail of long step output.
func boundOutput(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxOutputBytes {
		return s
	}
	const marker = "\n...[truncated]...\n"
	half := (MaxOutputBytes - len(marker)) / 2
	return strings.ToValidUTF8(s[:half]+marker+s[len(s)-half:], "")
}
