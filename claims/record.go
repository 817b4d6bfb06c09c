package claims

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/scour-project/scour/plugins"
)

// RecordFormat names the JSON document Record produces; it changes only
// when the document's meaning changes.
const RecordFormat = "scour.cleaning-record/v2"

// recordFormats are the formats ParseRecord reads: v1 lacks performed_by,
// the media fields and sanitization.
var recordFormats = []string{"scour.cleaning-record/v1", RecordFormat}

// Record is one cleaning as an operator or auditor reads it: a certificate
// of sanitization for one device.
type Record struct {
	Format         string               `json:"format"`
	SchemaVersions map[string]int       `json:"schema_versions"`
	RunID          string               `json:"run_id"`
	Attempt        int                  `json:"attempt"`
	Host           string               `json:"host"`
	PerformedBy    RecordPerformer      `json:"performed_by"`
	Device         RecordDevice         `json:"device"`
	PreviousTenant RecordTenant         `json:"previous_tenant"`
	Method         RecordMethod         `json:"method"`
	Sanitization   RecordSanitization   `json:"sanitization"`
	Verification   []RecordVerification `json:"verification"`
	// Images are the golden images steps put on the device (an FPGA's
	// bitstream), each with its read-back; absent when none did.
	Images []RecordImage `json:"images,omitempty"`
	Result RecordResult  `json:"result"`
	// Retirement, on a quarantined run because a step said retire (code
	// 13, a worn drive), says whether the retirement wipe erased the
	// device first; absent otherwise.
	Retirement  *RecordRetirement `json:"retirement,omitempty"`
	TriggeredBy string            `json:"triggered_by"`
	StartedAt   time.Time         `json:"started_at"`
	EndedAt     *time.Time        `json:"ended_at"`
	// Chain links a closed, signed record to the host's previous one.
	Chain *RecordChain `json:"chain,omitempty"`
	// Signature, GeneratedAt and SchemaVersions are not signed: the first
	// is the seal itself, the others describe this export.
	Signature   *RecordSignature `json:"signature,omitempty"`
	GeneratedAt time.Time        `json:"generated_at"`
}

// RecordChain places a record in its host's chain: the host's records are
// numbered from 1 as they close, and each carries the SHA-256 of the one
// before ("" for the first), so a deleted or altered record breaks the
// chain after it.
type RecordChain struct {
	HostSeq          int    `json:"host_seq"`
	PrevRecordSHA256 string `json:"prev_record_sha256"`
}

// RecordSignature seals a record: Ed25519 over the record's canonical JSON
// (every field but signature, generated_at and schema_versions; see
// CanonicalRecord), whose SHA-256 is RecordSHA256.
type RecordSignature struct {
	Algorithm    string `json:"algorithm"` // "ed25519"
	KeyID        string `json:"key_id"`    // KeyID of PublicKey
	PublicKey    string `json:"public_key"`
	RecordSHA256 string `json:"record_sha256"`
	Value        string `json:"value"` // base64
}

// RecordDevice is the device's identity as scour knew it.
type RecordDevice struct {
	ResourceProvider string `json:"resource_provider_uuid"`
	PCIAddress       string `json:"pci_address"`
	Serial           string `json:"serial,omitempty"`
	Model            string `json:"model,omitempty"`
	Media
}

// RecordPerformer is who performed the sanitization.
type RecordPerformer struct {
	Service      string `json:"service"` // "scourd"
	Host         string `json:"host"`
	ScourVersion string `json:"scour_version"`
}

// RecordSanitization is what the cleaning claims and did, in NIST SP
// 800-88 / IEEE 2883 terms (docs/claims.md maps every field).
type RecordSanitization struct {
	// Category is what the pipeline claims ("clear", "purge", "no-erase"
	// for a pipeline that erases nothing, or "" for none); a clear or
	// purge record is never cleaned without a successful erase (a
	// technique), nor a purge record without a passed verification after
	// it.
	Category   string            `json:"category"`
	Techniques []RecordTechnique `json:"techniques"`
	Tools      []RecordTool      `json:"tools"`
}

// RecordTechnique is a technique a step applied, in its own words.
type RecordTechnique struct {
	Step      string `json:"step"`
	Technique string `json:"technique"`
	Outcome   string `json:"outcome"`
}

// RecordTool is the tool a step ran.
type RecordTool struct {
	Step    string `json:"step"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
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
	// Tries is how the step's attempts within this run went (the engine's
	// details "scour_tries"), absent for a step that started none.
	Tries *RecordTries `json:"tries,omitempty"`
}

// RecordTries counts the attempts one step row made within the run (a
// retry inside the step, not a new row): EarlierErrors are the errors of
// the failed ones before the last, newest 3 kept, each cut to 512 bytes;
// EarlierErrorsOmitted counts older ones not kept.
type RecordTries struct {
	Count                int      `json:"count"`
	EarlierErrors        []string `json:"earlier_errors,omitempty"`
	EarlierErrorsOmitted int      `json:"earlier_errors_omitted,omitempty"`
}

// triesKey is pipeline.TriesKey.
const triesKey = "scour_tries"

// triesOf reads a step's tries from its details (nil when absent).
func triesOf(st Step) *RecordTries {
	raw, ok := st.Details[triesKey]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	var t RecordTries
	if err != nil || json.Unmarshal(b, &t) != nil || t.Count < 1 {
		return nil
	}
	return &t
}

// RecordVerification is one attempt of a step that checked the cleaning's
// result, with what it checked: the step's details "verification" in the
// plugin protocol's shape (how, how much it read, what it expected, and
// whether it passed).
type RecordVerification struct {
	Seq     int    `json:"seq"`
	Name    string `json:"name"`
	Attempt int    `json:"attempt"`
	Outcome string `json:"outcome"`
	plugins.Verification
	EndedAt *time.Time `json:"ended_at"`
}

// add takes the technique and the tool a step attempt reports.
func (z *RecordSanitization) add(st Step, outcome string) {
	if t, ok := st.Details[plugins.TechniqueKey].(string); ok && t != "" {
		z.Techniques = append(z.Techniques, RecordTechnique{Step: st.Name, Technique: t, Outcome: outcome})
	}
	tool, ok := st.Details["tool"].(map[string]any)
	if !ok {
		return
	}
	str := func(k string) string { v, _ := tool[k].(string); return v }
	t := RecordTool{Step: st.Name, Name: str("name"), Version: str("version"), Path: str("path"), SHA256: str("sha256")}
	if !slices.Contains(z.Tools, t) {
		z.Tools = append(z.Tools, t)
	}
	ext, _ := st.Details[externalToolsKey].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(ext)) {
		v, _ := ext[name].(string)
		if t := (RecordTool{Step: st.Name, Name: name, Version: v}); !slices.Contains(z.Tools, t) {
			z.Tools = append(z.Tools, t)
		}
	}
}

// externalToolsKey is pipeline.ExternalToolsKey: the external tools a
// built-in step ran, name -> version.
const externalToolsKey = "external_tools"

// verificationOf reads a verifying step's details.
func verificationOf(st Step, outcome string) RecordVerification {
	v := RecordVerification{Seq: st.Seq, Name: st.Name, Attempt: st.Attempt, Outcome: outcome, EndedAt: st.EndedAt}
	if raw, err := json.Marshal(st.Details[plugins.VerificationKey]); err == nil {
		_ = json.Unmarshal(raw, &v.Verification)
	}
	switch {
	case v.Result == "":
		v.Result = "not reported"
	case outcome != string(StepOK) && v.Result == "passed":
		v.Result = "failed" // the step's outcome decides, not its own word
	case !slices.Contains([]string{"passed", "failed", "not-applicable", "not reported"}, v.Result):
		// A word the record's schema does not know: never a pass.
		v.Reason = strings.TrimPrefix(v.Reason+fmt.Sprintf("; the step reported result %q", v.Result), "; ")
		v.Result = "failed"
	}
	return v
}

// RecordImage is a golden image one step attempt put on the device: what
// the image is (id and name where it came from, the hash its bytes were
// verified against, size) and the read-back: the id the device had to
// report, and what each region reported. The step's details "image" and
// "readback" (fpga-program; fpga-readback reports a read-back only).
type RecordImage struct {
	Seq       int            `json:"seq"`
	Step      string         `json:"step"`
	Outcome   string         `json:"outcome"`
	ID        string         `json:"id,omitempty"`
	Name      string         `json:"name,omitempty"`
	HashAlgo  string         `json:"hash_algo,omitempty"`
	HashValue string         `json:"hash_value,omitempty"`
	Size      int64          `json:"size,omitempty"`
	Source    string         `json:"source,omitempty"`
	Readback  RecordReadback `json:"readback"`
}

// RecordReadback is what the device reported after programming.
type RecordReadback struct {
	Expected string                 `json:"expected,omitempty"`
	Regions  []RecordRegionReadback `json:"regions,omitempty"`
	// Result is "passed", "failed" (a region reported another id, or
	// none), or "not reported" (the step failed before reading back).
	Result string `json:"result"`
	// ProgrammingProven (fpga-program; absent before scour recorded it):
	// every region reported another id before programming and the golden
	// one after. False when a region reported the golden id already
	// (Note says which): the read-back shows the golden image is there,
	// not that programming wrote it.
	ProgrammingProven *bool  `json:"programming_proven,omitempty"`
	Note              string `json:"note,omitempty"`
}

// RecordRegionReadback is one region's read-back.
type RecordRegionReadback struct {
	Region string `json:"region"`
	// Before is what the region reported before programming (fpga-program;
	// "" when nothing could say), Change what before and after show:
	// changed, unchanged, or before unknown.
	Before   string `json:"before,omitempty"`
	Reported string `json:"reported"`
	Source   string `json:"source"`
	Result   string `json:"result"`
	Change   string `json:"change,omitempty"`
}

// imageOf reads a step's golden image and read-back (false when the step
// reports neither).
func imageOf(st Step, outcome string) (RecordImage, bool) {
	img, hasImage := st.Details["image"].(map[string]any) // firmware-flash names a local image by a plain string
	rb, hasReadback := st.Details["readback"]
	if !hasImage && !hasReadback {
		return RecordImage{}, false
	}
	ri := RecordImage{Seq: st.Seq, Step: st.Name, Outcome: outcome}
	if raw, err := json.Marshal(img); err == nil {
		_ = json.Unmarshal(raw, &ri)
	}
	ri.Seq, ri.Step, ri.Outcome = st.Seq, st.Name, outcome // the image's own "id" must not shadow them
	if raw, err := json.Marshal(rb); err == nil && hasReadback {
		_ = json.Unmarshal(raw, &ri.Readback)
	}
	switch {
	case ri.Readback.Result == "":
		ri.Readback.Result = "not reported"
	case outcome != string(StepOK) && ri.Readback.Result == "passed":
		ri.Readback.Result = "failed" // the step's outcome decides, not its own word
	}
	if p := ri.Readback.ProgrammingProven; p != nil && *p && outcome != string(StepOK) {
		ri.Readback.ProgrammingProven = new(bool) // nor does a failed step prove anything
	}
	return ri, true
}

// RecordRetirement is what became of a device a step said to retire:
// erased by the run's retirement wipe (pipeline.RetireWipeKey) with a
// technique, or retired unwiped, in plain words.
type RecordRetirement struct {
	// Step is the step that said retire, or OperatorRetirement.
	Step string `json:"step"`
	// Wiped: the retirement wipe succeeded before the verdict.
	Wiped bool `json:"wiped"`
	// WipeStep names the wipe step ("" when none ran).
	WipeStep string `json:"wipe_step,omitempty"`
	// Technique is what the wipe reported it ran.
	Technique string `json:"technique,omitempty"`
	// ReadBack is the outcome of the read-back after the wipe
	// (pipeline.RetireReadBackKey): "passed", "not applicable: <why>", or
	// "failed: <why>" (then Wiped is false). "" for a record from before
	// scour read retirement wipes back.
	ReadBack string `json:"read_back,omitempty"`
	// Note says it in words: that the device holds none of the last
	// tenant's data, or that it may and must be destroyed, and why.
	Note string `json:"note"`
}

// codeRetire is plugins.CodeRetire; retireWipeKey is
// pipeline.RetireWipeKey; noWipeWhy is pipeline.NoWipeWhy.
const (
	codeRetire = plugins.CodeRetire
	// codeUnsupported: a read-back refused before reading anything (no
	// media to read): not applicable, not a failure.
	codeUnsupported = plugins.CodeUnsupported
	retireWipeKey   = "scour_retire_wipe"
	// retireReadBackKey is pipeline.RetireReadBackKey.
	retireReadBackKey = "scour_retire_readback"
	noWipeWhy         = "NOT WIPED (operator chose --no-wipe)"
)

// OperatorRetirement is RecordRetirement.Step of an operator's retirement
// (scourctl retire), which no step decided.
const OperatorRetirement = "scourctl retire"

// retirementOf reads, from a quarantined run's step rows, whether a step
// said retire and what the retirement wipe did (nil for any other run).
func retirementOf(run Run, steps []Step) *RecordRetirement {
	if run.State != RunQuarantined {
		return nil
	}
	var gate, wipe, readBack *Step
	for i := range steps {
		st := &steps[i]
		switch {
		case st.Details[retireWipeKey] == true:
			wipe = st
		case st.Details[retireReadBackKey] == true:
			readBack = st
		case st.Outcome == StepFailed && st.Code == codeRetire:
			gate = st
		}
	}
	if gate == nil && wipe == nil {
		return nil
	}
	// Without a step that said retire, the run is an operator's
	// retirement run (scourctl retire): its retirement wipe alone.
	rt := &RecordRetirement{Step: OperatorRetirement}
	if gate != nil {
		rt.Step = gate.Name
	}
	const destroy = "the device may still hold the last tenant's data: do not send it for an RMA, resale or disposal as it is; destroy it (shred, or degauss) and record that"
	switch {
	case wipe == nil:
		rt.Note = "NOT WIPED: no retirement wipe ran in this run; " + destroy
	case wipe.Outcome == StepSkipped && strings.Contains(wipe.Output, noWipeWhy):
		rt.WipeStep = wipe.Name
		rt.Note = noWipeWhy + ": the operator retired it without a wipe; " + destroy
	case wipe.Outcome == StepOK && readBack != nil && readBack.Outcome == StepFailed && readBack.Code != codeUnsupported:
		rt.WipeStep = wipe.Name
		rt.ReadBack = "failed: " + readBack.Output
		rt.Note = fmt.Sprintf("NOT WIPED: the retirement wipe (step %s) reported success but its read-back (step %s) found the media not erased (%s); %s", wipe.Name, readBack.Name, readBack.Output, destroy)
	case wipe.Outcome == StepOK:
		if readBack != nil {
			rt.ReadBack = "passed"
			if readBack.Outcome != StepOK {
				rt.ReadBack = "not applicable: " + strings.TrimPrefix(readBack.Output, "skipped: ")
			}
		}
		rt.Wiped, rt.WipeStep = true, wipe.Name
		rt.Technique, _ = wipe.Details[plugins.TechniqueKey].(string)
		said := rt.Technique
		if said == "" {
			said = "a technique the step did not report"
		}
		rt.Note = fmt.Sprintf("wiped before retirement by step %s with %s: the device holds none of the last tenant's data", wipe.Name, said)
		if rt.ReadBack != "" {
			rt.Note = fmt.Sprintf("wiped before retirement by step %s with %s, read-back %s: the device holds none of the last tenant's data", wipe.Name, said, rt.ReadBack)
		}
	default:
		rt.WipeStep = wipe.Name
		why := wipe.Output
		if why == "" {
			why = string(wipe.Outcome)
		}
		rt.Note = fmt.Sprintf("NOT WIPED: the retirement wipe (step %s) could not erase it (%s); %s", wipe.Name, why, destroy)
	}
	return rt
}

// RecordResult is the verdict.
type RecordResult struct {
	State   string `json:"state"`
	Summary string `json:"summary,omitempty"`
}

// Record builds the cleaning record of one run (finished or not: an
// unfinished run's record says "running"). A signed record is the document
// as signed, with its signature.
func (s *Store) Record(ctx context.Context, runID string) (Record, error) {
	raw, err := s.ExportJSON(ctx, runID)
	if err != nil {
		return Record{}, err
	}
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return Record{}, fmt.Errorf("claims: record of run %s: %w", runID, err)
	}
	return rec, nil
}

// ExportJSON returns the record of one run as one JSON document: for a
// signed record, exactly the signed fields with its signature (so the
// export verifies whatever version of scour reads it), else built from the
// run's rows.
func (s *Store) ExportJSON(ctx context.Context, runID string) (json.RawMessage, error) {
	doc, _, err := s.ExportRecord(ctx, runID)
	return doc, err
}

// ExportRecord is ExportJSON, and says whether the document is the run's
// final, sealed record (closed: returned, quarantined, aborted, failed).
// Only a final document may be marked exported (MarkExported): a record
// exported while its run was open is not the one retention would delete.
func (s *Store) ExportRecord(ctx context.Context, runID string) (doc json.RawMessage, final bool, err error) {
	versions, err := s.SchemaVersions(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("claims: record of run %s: %w", runID, err)
	}
	generated := s.now().UTC().Truncate(time.Microsecond)
	// The run before its seal: closing sets ended_at and the signature in
	// one UPDATE, so a run read closed shows its signature here, and a run
	// that closes after it was read is exported as it was read (not final).
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		return nil, false, err
	}
	seal, err := s.seal(ctx, s.r, runID)
	if err != nil {
		return nil, false, fmt.Errorf("claims: record of run %s: %w", runID, err)
	}
	if seal.Signed != "" {
		doc, err := seal.document(versions, generated)
		return doc, err == nil, err
	}
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		return nil, false, err
	}
	rec := buildRecord(run, steps)
	rec.SchemaVersions, rec.GeneratedAt = versions, generated
	doc, err = json.Marshal(rec)
	return doc, err == nil && run.Closed(), err
}

// buildRecord makes the record of a run from its rows.
func buildRecord(run Run, steps []Step) Record {
	rec := Record{
		Format:         RecordFormat,
		RunID:          run.ID,
		Attempt:        run.Attempt,
		Host:           run.Host,
		PerformedBy:    RecordPerformer{Service: "scourd", Host: run.Host, ScourVersion: run.ScourVersion},
		Device:         RecordDevice{ResourceProvider: run.DeviceRP, PCIAddress: run.Address, Serial: run.Serial, Model: run.Model, Media: run.Media},
		Sanitization:   RecordSanitization{Category: run.Category, Techniques: []RecordTechnique{}, Tools: []RecordTool{}},
		PreviousTenant: RecordTenant{InstanceUUID: run.PrevInstance, ProjectID: run.PrevProject},
		Method: RecordMethod{Profile: run.Profile, Pipeline: run.Pipeline, PipelineVersion: run.PipelineVersion,
			PlannedSteps: run.PlannedSteps, Steps: []RecordStep{}},
		Verification: []RecordVerification{},
		Result:       RecordResult{State: string(run.State), Summary: run.Summary},
		TriggeredBy:  run.Trigger,
		StartedAt:    run.StartedAt,
		EndedAt:      run.EndedAt,
	}
	for _, st := range steps {
		rs := RecordStep{Seq: st.Seq, Index: st.Index, Name: st.Name, Attempt: st.Attempt, Optional: st.Optional, Verification: st.Verification,
			Outcome: string(st.Outcome), Output: st.Output, Code: st.Code, Details: st.Details, Stderr: st.Stderr,
			Progress: st.Progress, StartedAt: st.StartedAt, EndedAt: st.EndedAt, Tries: triesOf(st)}
		if rs.Outcome == "" {
			rs.Outcome = "running"
		}
		rec.Method.Steps = append(rec.Method.Steps, rs)
		rec.Sanitization.add(st, rs.Outcome)
		if st.Verification {
			rec.Verification = append(rec.Verification, verificationOf(st, rs.Outcome))
		}
		if img, ok := imageOf(st, rs.Outcome); ok {
			rec.Images = append(rec.Images, img)
		}
	}
	rec.Retirement = retirementOf(run, steps)
	return rec
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
	if !slices.Contains(recordFormats, r.Format) {
		return Record{}, fmt.Errorf("claims: parse cleaning record: format %q, want one of %v", r.Format, recordFormats)
	}
	return r, nil
}
