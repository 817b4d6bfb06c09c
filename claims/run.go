package claims

import (
	"errors"
	"strings"
	"time"
)

// RunState is where a cleaning run stands. Only RunRunning is unfinished;
// a finished run is never modified again.
type RunState string

const (
	RunRunning     RunState = "running"
	RunReturned    RunState = "returned"    // every step passed; device may rejoin the pool
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
	Host            string
	DeviceRP        string
	Address         string
	Serial          string
	Model           string
	PrevInstance    string // UnknownTenant when the device was dirty without a claim
	PrevProject     string
	Profile         string // cleaning profile that matched the device
	Pipeline        string
	PipelineVersion string
	PlannedSteps    []string // the pipeline's step names, in order, when the run opened
	Trigger         string   // who or what started it: "instance.delete.end msg 42", "scourctl clean --device ..."
}

// Run is one cleaning of one device.
type Run struct {
	ID string
	// Attempt counts the device's runs since its last returned run,
	// this one included (1 for the first); retry budgets use it.
	Attempt int
	RunStart
	State     RunState
	Summary   string
	StartedAt time.Time
	EndedAt   *time.Time
}

// Finished reports whether the run has its verdict.
func (r Run) Finished() bool { return r.State != RunRunning }

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
