package pipeline

import (
	"context"
	"time"
)

// Checkpoints persists runs and step outcomes so a crash resumes instead of
// redoing or skipping work. The claims store implements it; MemCheckpoints
// is the in-memory version for tests and dry tools.
//
// Contract (checked by pipeline/checkpointstest): each call returns only
// after the change is durable. OpenRun returns the device's open run (not
// yet finished) with its latest record per step index if there is one, or
// creates a new run. Attempt counts runs for the device since its last
// clean verdict (1 for the first). Step writes to a finished run fail.
// Two variants are allowed, and the suite checks them where a store says
// it has them (checkpointstest.Options): a cleaned run may stay open, and
// be resumed with every step succeeded, until the caller returned the
// device; a quarantine verdict may restart the count too. The claims
// store (claims/pipelinestore) does both.
type Checkpoints interface {
	OpenRun(ctx context.Context, start RunStart) (Run, []StepRecord, error)
	StepStarted(ctx context.Context, runID string, rec StepRecord) error
	StepProgress(ctx context.Context, runID string, step int, fraction float64) error
	StepFinished(ctx context.Context, runID string, rec StepRecord) error
	FinishRun(ctx context.Context, runID string, res Result) error
}

// IdentityRecorder is a Checkpoints that can complete a run's device
// identity once a step's driver revealed it: an NVMe bound to vfio-pci
// shows no serial, model or firmware until it is bound to nvme for a
// step (what discovery knew before came from the backend's memory of an
// earlier bind, before the tenant, who may have updated the firmware
// through passthrough). The engine calls it when such a bind shows a
// serial, model or firmware the run did not have.
type IdentityRecorder interface {
	SetIdentity(ctx context.Context, runID, serial, model, firmware string) error
}

// RunStart describes a run about to start.
type RunStart struct {
	Device          string    `json:"device"`
	RPUUID          string    `json:"rp_uuid"`
	Profile         string    `json:"profile"`
	Pipeline        string    `json:"pipeline"`
	PipelineVersion int       `json:"pipeline_version"`
	Steps           []string  `json:"steps"`
	Started         time.Time `json:"started"`
	// Serial and Model identify the device in the record, when discovery
	// knows them, with the rest of what the certificate names about the
	// media: vendor id, firmware, kind and capacity (sum of its media, 0
	// when unknown, e.g. an NVMe bound to vfio-pci).
	Serial string `json:"serial,omitempty"`
	// SerialSource is where Serial came from (hardware.Device.SerialSource):
	// "vpd", or "" for the device's driver (NVMe Identify Controller).
	// SetIdentity, called from a step's driver, resets it to "".
	SerialSource  string `json:"serial_source,omitempty"`
	Model         string `json:"model,omitempty"`
	Vendor        string `json:"vendor,omitempty"`
	Firmware      string `json:"firmware,omitempty"`
	Kind          string `json:"kind,omitempty"`
	CapacityBytes int64  `json:"capacity_bytes,omitempty"`
	// Category is the pipeline's claimed sanitization category.
	Category string `json:"category,omitempty"`
	// Trigger is what made scour clean the device (Target.Trigger): a run
	// opened now records it as its triggered_by; a resumed run keeps the
	// trigger it opened with.
	Trigger string `json:"trigger,omitempty"`
}

// Run is a persisted run. Its RunStart is what was stored when it opened,
// which may differ from the current config (then the engine finishes it as
// superseded and opens a new one).
type Run struct {
	ID      string   `json:"id"`
	Attempt int      `json:"attempt"`
	Start   RunStart `json:"start"`
	// ClearGen is the Placement generation of the all-clear the run's
	// first destructive attempt started on (GenerationRecorder), when
	// HasClearGen.
	ClearGen    int  `json:"clear_gen,omitempty"`
	HasClearGen bool `json:"has_clear_gen,omitempty"`
	// PutMayHaveLanded: an un-reserve PUT of the (cleaned) run may have
	// landed; its journal, which the un-reserve reads, decides whether
	// Placement moved on since (placement.ErrStaleReturn), not ClearGen.
	PutMayHaveLanded bool `json:"put_may_have_landed,omitempty"`
}

// StepState is a step's persisted state.
type StepState string

const (
	StepRunning   StepState = "running"
	StepSucceeded StepState = "succeeded"
	StepFailed    StepState = "failed"
	StepSkipped   StepState = "skipped"
)

// StepRecord is one step's persisted outcome.
type StepRecord struct {
	RunID    string         `json:"run_id"`
	Index    int            `json:"index"`
	Name     string         `json:"name"`
	State    StepState      `json:"state"`
	Attempts int            `json:"attempts"`
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished,omitzero"`
	Progress float64        `json:"progress"`
	Code     int            `json:"code,omitempty"`
	Message  string         `json:"message,omitempty"`
	Details  map[string]any `json:"details,omitempty"`
	Stderr   string         `json:"stderr,omitempty"`
}

// done reports whether a resumed run may keep this record instead of
// re-running the step.
func (r StepRecord) done() bool { return r.State == StepSucceeded || r.State == StepSkipped }
