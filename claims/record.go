package claims

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// RecordFormat names the JSON document Record produces; it changes only
// when the document's meaning changes.
const RecordFormat = "scour.cleaning-record/v1"

// Record is one cleaning as an operator or auditor reads it: a certificate
// of sanitization for one device.
type Record struct {
	Format         string         `json:"format"`
	SchemaVersions map[string]int `json:"schema_versions"`
	RunID          string         `json:"run_id"`
	Attempt        int            `json:"attempt"`
	Host           string         `json:"host"`
	Device         RecordDevice   `json:"device"`
	PreviousTenant RecordTenant   `json:"previous_tenant"`
	Method         RecordMethod   `json:"method"`
	Verification   []RecordStep   `json:"verification"`
	Result         RecordResult   `json:"result"`
	TriggeredBy    string         `json:"triggered_by"`
	StartedAt      time.Time      `json:"started_at"`
	EndedAt        *time.Time     `json:"ended_at"`
	GeneratedAt    time.Time      `json:"generated_at"`
}

// RecordDevice is the device's identity as scour knew it.
type RecordDevice struct {
	ResourceProvider string `json:"resource_provider_uuid"`
	PCIAddress       string `json:"pci_address"`
	Serial           string `json:"serial,omitempty"`
	Model            string `json:"model,omitempty"`
}

// RecordTenant is who used the device before ("unknown" when it was found
// dirty without a claim).
type RecordTenant struct {
	InstanceUUID string `json:"instance_uuid"`
	ProjectID    string `json:"project_id"`
}

// RecordMethod is the pipeline and every step attempt it made.
type RecordMethod struct {
	Profile         string       `json:"profile,omitempty"`
	Pipeline        string       `json:"pipeline"`
	PipelineVersion string       `json:"pipeline_version"`
	PlannedSteps    []string     `json:"planned_steps"`
	Steps           []RecordStep `json:"steps"`
}

// RecordStep is one attempt of one step.
type RecordStep struct {
	Seq          int            `json:"seq"`
	Index        int            `json:"index"`
	Name         string         `json:"name"`
	Attempt      int            `json:"attempt"`
	Optional     bool           `json:"optional,omitempty"`
	Verification bool           `json:"verification,omitempty"`
	Outcome      string         `json:"outcome"`
	Output       string         `json:"output,omitempty"`
	Code         int            `json:"code,omitempty"`
	Details      map[string]any `json:"details,omitempty"`
	Stderr       string         `json:"stderr,omitempty"`
	Progress     int            `json:"progress_percent"`
	StartedAt    time.Time      `json:"started_at"`
	EndedAt      *time.Time     `json:"ended_at"`
}

// RecordResult is the verdict.
type RecordResult struct {
	State   string `json:"state"`
	Summary string `json:"summary,omitempty"`
}

// Record builds the cleaning record of one run (finished or not: an
// unfinished run's record says "running").
func (s *Store) Record(ctx context.Context, runID string) (Record, error) {
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		return Record{}, err
	}
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		return Record{}, err
	}
	versions, err := s.SchemaVersions(ctx)
	if err != nil {
		return Record{}, fmt.Errorf("claims: record of run %s: %w", runID, err)
	}
	rec := Record{
		Format:         RecordFormat,
		SchemaVersions: versions,
		RunID:          run.ID,
		Attempt:        run.Attempt,
		Host:           run.Host,
		Device:         RecordDevice{ResourceProvider: run.DeviceRP, PCIAddress: run.Address, Serial: run.Serial, Model: run.Model},
		PreviousTenant: RecordTenant{InstanceUUID: run.PrevInstance, ProjectID: run.PrevProject},
		Method: RecordMethod{Profile: run.Profile, Pipeline: run.Pipeline, PipelineVersion: run.PipelineVersion,
			PlannedSteps: run.PlannedSteps, Steps: []RecordStep{}},
		Verification: []RecordStep{},
		Result:       RecordResult{State: string(run.State), Summary: run.Summary},
		TriggeredBy:  run.Trigger,
		StartedAt:    run.StartedAt,
		EndedAt:      run.EndedAt,
		GeneratedAt:  s.now().UTC().Truncate(time.Microsecond),
	}
	for _, st := range steps {
		rs := RecordStep{Seq: st.Seq, Index: st.Index, Name: st.Name, Attempt: st.Attempt, Optional: st.Optional, Verification: st.Verification,
			Outcome: string(st.Outcome), Output: st.Output, Code: st.Code, Details: st.Details, Stderr: st.Stderr,
			Progress: st.Progress, StartedAt: st.StartedAt, EndedAt: st.EndedAt}
		if rs.Outcome == "" {
			rs.Outcome = "running"
		}
		rec.Method.Steps = append(rec.Method.Steps, rs)
		if st.Verification {
			rec.Verification = append(rec.Verification, rs)
		}
	}
	return rec, nil
}

// WriteJSON writes the record as one indented JSON document.
func (r Record) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ParseRecord reads a document written by WriteJSON, refusing other formats.
func ParseRecord(data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("claims: parse cleaning record: %w", err)
	}
	if r.Format != RecordFormat {
		return Record{}, fmt.Errorf("claims: parse cleaning record: format %q, want %q", r.Format, RecordFormat)
	}
	return r, nil
}
