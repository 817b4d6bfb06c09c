package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/plugins"
)

// recordSchema compiles the published JSON Schema of cleaning records.
func recordSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(filepath.Join("..", "..", "docs", "cleaning-record.schema.json"))
	if err != nil {
		t.Fatalf("docs/cleaning-record.schema.json: %v", err)
	}
	return sch
}

// Real exported records, signed and unsigned, open and closed, validate
// against the schema published in docs/.
func TestExportedRecordsMatchPublishedSchema(t *testing.T) {
	sch := recordSchema(t)
	signedDir, _ := seedSignedStore(t)
	plainDir, _ := seedRecordsStore(t)
	verifyDir := seedVerifications(t)
	for _, args := range [][]string{
		{"records", "export", "--state-path", signedDir, "--device", "0000:81:00.0", "--all"},
		{"records", "export", "--state-path", plainDir, "--device", "rp-nvme-0", "--all"},
		{"records", "export", "--state-path", verifyDir, "--device", "rp-v", "--all"},
	} {
		code, out, errs := recordsCLI(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errs)
		}
		docs, err := claims.SplitDocuments([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(d))
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(inst); err != nil {
				t.Errorf("exported record does not match docs/cleaning-record.schema.json: %v\n%s", err, d)
			}
		}
	}
	// And the schema is not vacuous: a record without its device fails.
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(`{"format": "scour.cleaning-record/v2", "run_id": "x"}`)))
	if sch.Validate(inst) == nil {
		t.Error("the schema accepts a record without device, method and result")
	}
}

// seedVerifications stores one run per verification outcome the steps
// report (passed, failed with a mismatch, not applicable with a reason),
// each with a technique and a tool, through the real store.
func seedVerifications(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := claims.Open(ctx, claims.Config{StatePath: dir}, claims.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, v := range []plugins.Verification{
		{Method: "read-back", BytesRead: 4096, Samples: 1, Expected: "every byte 0x00", Result: plugins.VerifyPassed},
		{Method: "read-back", BytesRead: 4096, Expected: "every byte 0x00", Result: plugins.VerifyFailed, Mismatch: "byte at offset 7 is 0x41"},
		{Method: "none (nothing read)", Expected: "nothing", Result: plugins.VerifyNotApplicable, Reason: "crypto erase leaves noise"},
	} {
		run, _, err := s.OpenRun(ctx, claims.RunStart{Host: "compute-1", DeviceRP: "rp-v", Address: "0000:81:00.0", Pipeline: "nvme", Category: "purge",
			Media: claims.Media{Make: "0x144d", Firmware: "1.0", Type: "nvme", CapacityBytes: 1 << 30}, ScourVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.StepStarted(ctx, claims.StepStart{RunID: run.ID, Name: "verify"})
		if err == nil {
			err = s.StepFinished(ctx, run.ID, st.Seq, claims.StepResult{Outcome: claims.StepOK, Details: map[string]any{
				plugins.VerificationKey: v.Map(), plugins.TechniqueKey: "NVMe Sanitize, Crypto Erase",
				"tool":        map[string]any{"name": "plugin", "path": "/usr/libexec/scour/plugins/v", "sha256": strings.Repeat("ab", 32)},
				"scour_tries": map[string]any{"count": 2, "earlier_errors": []string{"plugin /usr/libexec/scour/plugins/v CLEAN: ran past its deadline (code 15)"}}}})
		}
		if err == nil {
			err = s.FinishRun(ctx, run.ID, claims.RunQuarantined, "test")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// An FPGA run: the golden image programmed and read back (as the
	// fpga-program step stores its details, JSON-decoded).
	run, _, err := s.OpenRun(ctx, claims.RunStart{Host: "compute-1", DeviceRP: "rp-v", Address: "0000:5e:00.0", Pipeline: "fpga-golden", ScourVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.StepStarted(ctx, claims.StepStart{RunID: run.ID, Name: "program"})
	if err == nil {
		err = s.StepFinished(ctx, run.ID, st.Seq, claims.StepResult{Outcome: claims.StepFailed, Code: 12, Details: map[string]any{
			"image": map[string]any{"id": "8f1c6b2e-5d1a-4c43-9c35-0f6b1f7b8d21", "name": "n3000-golden", "hash_algo": "sha512",
				"hash_value": strings.Repeat("cd", 64), "size": 4096, "source": "glance"},
			"readback": map[string]any{"expected": "0x23000410010310", "result": "failed", "programming_proven": false,
				"note": "unchanged: regions [region0] reported the golden id before programming already", "regions": []any{
					map[string]any{"region": "region0", "before": "0x23000410010310", "reported": "0x23000410010310", "source": "sysfs", "result": "passed", "change": "unchanged"},
					map[string]any{"region": "region1", "reported": "", "source": "sysfs", "result": "not-reported", "change": "before unknown"}}}}})
	}
	if err == nil {
		err = s.FinishRun(ctx, run.ID, claims.RunQuarantined, "read-back differs")
	}
	if err != nil {
		t.Fatal(err)
	}
	// Worn drives retired: one wiped first, one the wipe could not erase.
	for _, wipe := range []claims.StepOutcome{claims.StepOK, claims.StepFailed} {
		run, _, err := s.OpenRun(ctx, claims.RunStart{Host: "compute-1", DeviceRP: "rp-v", Address: "0000:81:00.0", Pipeline: "nvme", ScourVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		err = s.FinishStep(ctx, claims.StepStart{RunID: run.ID, Name: "wear", Index: 0}, claims.StepResult{Outcome: claims.StepFailed, Code: plugins.CodeRetire, Output: "worn"})
		if err == nil {
			err = s.FinishStep(ctx, claims.StepStart{RunID: run.ID, Name: "retire-wipe", Index: 1}, claims.StepResult{Outcome: wipe, Output: "erase failed",
				Details: map[string]any{"scour_retire_wipe": true, plugins.TechniqueKey: "NVMe Sanitize, Crypto Erase"}})
		}
		if err == nil {
			err = s.FinishRun(ctx, run.ID, claims.RunQuarantined, "retired")
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := s.Record(ctx, run.ID); err != nil || rec.Retirement == nil || rec.Retirement.Wiped != (wipe == claims.StepOK) {
			t.Fatalf("retired run's record: retirement %+v, %v", rec.Retirement, err)
		}
	}
	return dir
}

// records show (text) prints the record's retirement: who decided it,
// whether the device was wiped and how, and the note.
func TestRecordTextShowsRetirement(t *testing.T) {
	var b strings.Builder
	writeRecordText(&b, claims.Record{Retirement: &claims.RecordRetirement{Step: claims.OperatorRetirement, Wiped: true,
		WipeStep: "retire-wipe", Technique: "NVMe Sanitize, Crypto Erase", Note: "wiped before retirement"}})
	if want := "retirement:  decided by scourctl retire; wiped by step retire-wipe (NVMe Sanitize, Crypto Erase): wiped before retirement"; !strings.Contains(b.String(), want) {
		t.Errorf("records show text lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	writeRecordText(&b, claims.Record{Retirement: &claims.RecordRetirement{Step: "wear", Note: "NOT WIPED (operator chose --no-wipe): destroy it"}})
	if want := "decided by wear; NOT WIPED: NOT WIPED (operator chose --no-wipe): destroy it"; !strings.Contains(b.String(), want) {
		t.Errorf("records show text lacks %q:\n%s", want, b.String())
	}
}
