package pipelinestore

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins"
)

// retireConfig: a gate plugin that says retire (a worn drive), an erase
// the pipeline never reaches, and the retirement wipe plugin "shred".
func retireConfig() pipeline.Config {
	cfg := config(step("gate", true), step("erase", true))
	wipe := step("shred", true)
	cfg.Profiles[0].Pipeline.RetireWipe = &wipe
	return cfg
}

func retirePlugins(wipe func(ctx context.Context) (*plugins.Result, error)) *fakePlugins {
	return &fakePlugins{clean: map[string]func(context.Context) (*plugins.Result, error){
		"gate": func(context.Context) (*plugins.Result, error) {
			return nil, plugins.Errorf(plugins.CodeRetire, "percent_used 95 >= 90: retire it")
		},
		"shred": wipe,
	}}
}

// fakeReadBack is the retirement read-back's outcome on the fake
// backend, which has no media to read (its device cannot be bound to
// nvme): not applicable, and the record says why.
const fakeReadBack = "not applicable: binding 0000:81:00.0 to nvme for step retire-readback: fake: bind driver: not supported by device"

func shredded(context.Context) (*plugins.Result, error) {
	return plugins.OK(map[string]any{plugins.EraseKey: "shred", plugins.ExpectKey: "0x00", plugins.TechniqueKey: "Overwrite, zeros"}), nil
}

// The record of a worn drive's run says it was wiped before retirement,
// with the technique, from the stored rows (and the signed document); a
// shutdown during the wipe resumes into the gate and the wipe again.
func TestRecordOfRetirementNamesTheWipe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := openStore(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	pr := retirePlugins(func(ctx context.Context) (*plugins.Result, error) { cancel(); <-ctx.Done(); return nil, ctx.Err() })
	if res, err := engine(t, retireConfig(), s, pr).Clean(ctx, target); err == nil {
		t.Fatalf("shutdown during the retirement wipe returned a verdict: %+v", res)
	}
	s.Close()

	s = openStore(t, dir)
	pr = retirePlugins(shredded)
	res, err := engine(t, retireConfig(), s, pr).Clean(context.Background(), target)
	if err != nil || res.Verdict != pipeline.VerdictQuarantine || res.Step != "gate" {
		t.Fatalf("Clean = %+v, %v; want quarantine at gate", res, err)
	}
	if got := pr.Calls(); !slices.Equal(got, []string{"gate", "shred"}) {
		t.Fatalf("calls after the restart %v; want the gate, then the wipe again (never the pipeline's erase)", got)
	}
	rec, err := s.Record(context.Background(), res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	want := claims.RecordRetirement{Step: "gate", Wiped: true, WipeStep: "shred", Technique: "Overwrite, zeros", ReadBack: fakeReadBack,
		Note: "wiped before retirement by step shred with Overwrite, zeros, read-back " + fakeReadBack + ": the device holds none of the last tenant's data"}
	if rec.Retirement == nil || *rec.Retirement != want {
		t.Errorf("record retirement %+v; want %+v", rec.Retirement, want)
	}
	if rec.Result.State != string(claims.RunQuarantined) || !strings.Contains(rec.Result.Summary, "wiped before retirement") {
		t.Errorf("record result %+v", rec.Result)
	}
	if !slices.Contains(rec.Sanitization.Techniques, claims.RecordTechnique{Step: "shred", Technique: "Overwrite, zeros", Outcome: string(claims.StepOK)}) {
		t.Errorf("techniques %+v lack the retirement wipe's", rec.Sanitization.Techniques)
	}
	wipeRow, rb := rec.Method.Steps[len(rec.Method.Steps)-2], rec.Method.Steps[len(rec.Method.Steps)-1]
	if wipeRow.Name != "shred" || wipeRow.Index != 2 || wipeRow.Details[pipeline.RetireWipeKey] != true {
		t.Errorf("step row %+v; want the wipe at index 2 marked %s", wipeRow, pipeline.RetireWipeKey)
	}
	if rb.Name != pipeline.RetireReadBackName || rb.Index != 3 || rb.Details[pipeline.RetireReadBackKey] != true {
		t.Errorf("last step row %+v; want the wipe's read-back at index 3 marked %s", rb, pipeline.RetireReadBackKey)
	}
}

// A wipe that cannot erase (a permanent failure) leaves a record that
// says plainly the device is unwiped and must be destroyed.
func TestRecordOfUnwipedRetirementSaysSo(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	pr := retirePlugins(func(context.Context) (*plugins.Result, error) {
		return nil, plugins.Errorf(plugins.CodePermanent, "sanitize failed: media error")
	})
	res, err := engine(t, retireConfig(), s, pr).Clean(context.Background(), target)
	if err != nil || res.Verdict != pipeline.VerdictQuarantine {
		t.Fatalf("Clean = %+v, %v", res, err)
	}
	rec, err := s.Record(context.Background(), res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	rt := rec.Retirement
	if rt == nil || rt.Wiped || rt.WipeStep != "shred" || !strings.HasPrefix(rt.Note, "NOT WIPED") ||
		!strings.Contains(rt.Note, "media error") || !strings.Contains(rt.Note, "destroy it") {
		t.Errorf("record retirement %+v; want unwiped, with the wipe's error, and destroy it", rt)
	}
	if !strings.Contains(rec.Result.Summary, "RETIRED UNWIPED") {
		t.Errorf("record summary %q does not say RETIRED UNWIPED", rec.Result.Summary)
	}
}

// An operator's retirement of a device not cleaned since its last tenant:
// the store's retirement waits for its wipe; the retirement run (a
// shutdown during the wipe resumed, rule 5) runs the wipe alone, never the
// pipeline, and its record names the operator's retirement and the
// technique; the retirement then waits for nothing, its reason saying how
// it ended.
func TestRecordOfOperatorRetirementNamesTheWipe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := openStore(t, dir)
	bg := context.Background()
	if _, _, err := s.Retire(bg, "compute-1", target.RPUUID, string(target.Address), "alice", "RMA", claims.WipePending, "wipe pending"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	pr := retirePlugins(func(ctx context.Context) (*plugins.Result, error) { cancel(); <-ctx.Done(); return nil, ctx.Err() })
	if res, err := engine(t, retireConfig(), s, pr).Retire(ctx, target, "retired by alice: RMA", false); err == nil {
		t.Fatalf("shutdown during the retirement wipe returned a verdict: %+v", res)
	}
	s.Close()

	s = openStore(t, dir)
	pr = retirePlugins(shredded)
	res, err := engine(t, retireConfig(), s, pr).Retire(bg, target, "retired by alice: RMA", false)
	if err != nil || res.Verdict != pipeline.VerdictQuarantine {
		t.Fatalf("Retire = %+v, %v; want quarantine", res, err)
	}
	if got := pr.Calls(); !slices.Equal(got, []string{"shred"}) {
		t.Fatalf("calls after the restart %v; want the wipe alone", got)
	}
	rec, err := s.Record(bg, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	want := claims.RecordRetirement{Step: claims.OperatorRetirement, Wiped: true, WipeStep: "shred", Technique: "Overwrite, zeros", ReadBack: fakeReadBack,
		Note: "wiped before retirement by step shred with Overwrite, zeros, read-back " + fakeReadBack + ": the device holds none of the last tenant's data"}
	if rec.Retirement == nil || *rec.Retirement != want {
		t.Errorf("record retirement %+v; want %+v", rec.Retirement, want)
	}
	if rec.Result.State != string(claims.RunQuarantined) {
		t.Errorf("record result %+v", rec.Result)
	}
	q, ok, err := s.ActiveQuarantine(bg, "compute-1", target.RPUUID)
	if err != nil || !ok || q.Wipe != "" || !q.Retired() || !strings.Contains(q.Reason, "retirement run "+res.RunID+": ") ||
		!strings.Contains(q.Reason, "wiped before retirement by step shred (Overwrite, zeros)") {
		t.Errorf("retirement after its run = %+v, %v, %v; want it waiting for nothing, naming the run and the wipe", q, ok, err)
	}
}

// scourctl retire --no-wipe: the record says NOT WIPED (operator chose
// --no-wipe) and to destroy the device; nothing ran.
func TestRecordOfNoWipeRetirementSaysSo(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "state"))
	pr := retirePlugins(shredded)
	res, err := engine(t, retireConfig(), s, pr).Retire(context.Background(), target, "retired by alice: shredder", true)
	if err != nil || res.Verdict != pipeline.VerdictQuarantine {
		t.Fatalf("Retire = %+v, %v", res, err)
	}
	if got := pr.Calls(); len(got) != 0 {
		t.Errorf("plugins run on --no-wipe: %v", got)
	}
	rec, err := s.Record(context.Background(), res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	rt := rec.Retirement
	if rt == nil || rt.Wiped || rt.Step != claims.OperatorRetirement || !strings.HasPrefix(rt.Note, pipeline.NoWipeWhy) || !strings.Contains(rt.Note, "destroy it") {
		t.Errorf("record retirement %+v; want unwiped, %s, destroy it", rt, pipeline.NoWipeWhy)
	}
	if !strings.Contains(rec.Result.Summary, "RETIRED UNWIPED") {
		t.Errorf("record summary %q does not say RETIRED UNWIPED", rec.Result.Summary)
	}
}
