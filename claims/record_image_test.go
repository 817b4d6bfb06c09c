package claims

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The record names the golden image a step put on the device and its
// read-back; a failed step's "passed" never reads as passed.
func TestRecordNamesGoldenImageAndReadback(t *testing.T) {
	image := map[string]any{"id": "8f1c", "name": "n3000-golden", "hash_algo": "sha512", "hash_value": "cd", "size": float64(4096), "source": "glance"}
	readback := func(result string) map[string]any {
		return map[string]any{"expected": "0x23", "result": result, "regions": []any{
			map[string]any{"region": "region0", "reported": "0x23", "source": "sysfs", "result": "passed"}}}
	}
	steps := []Step{
		{Seq: 1, Name: "program", Outcome: StepOK, Details: map[string]any{"image": image, "readback": readback("passed")}},
		{Seq: 2, Name: "reset", Outcome: StepOK},
		{Seq: 3, Name: "readback", Outcome: StepFailed, Details: map[string]any{"readback": readback("passed")}},
		{Seq: 4, Name: "program", Outcome: StepFailed, Details: map[string]any{"image": image}},
	}
	rec := buildRecord(Run{ID: "r1"}, steps)
	region := []RecordRegionReadback{{Region: "region0", Reported: "0x23", Source: "sysfs", Result: "passed"}}
	want := []RecordImage{
		{Seq: 1, Step: "program", Outcome: "ok", ID: "8f1c", Name: "n3000-golden", HashAlgo: "sha512", HashValue: "cd", Size: 4096, Source: "glance",
			Readback: RecordReadback{Expected: "0x23", Regions: region, Result: "passed"}},
		{Seq: 3, Step: "readback", Outcome: "failed", Readback: RecordReadback{Expected: "0x23", Regions: region, Result: "failed"}},
		{Seq: 4, Step: "program", Outcome: "failed", ID: "8f1c", Name: "n3000-golden", HashAlgo: "sha512", HashValue: "cd", Size: 4096, Source: "glance",
			Readback: RecordReadback{Result: "not reported"}},
	}
	if d := cmp.Diff(want, rec.Images); d != "" {
		t.Errorf("images (-want +got):\n%s", d)
	}
	if rec := buildRecord(Run{ID: "r2"}, steps[1:2]); rec.Images != nil {
		t.Errorf("a run without images lists %v", rec.Images)
	}
}

// A step naming its image by a plain string (firmware-flash's local file
// name) adds no image to the record; a Glance image it flashed does.
func TestRecordImagesSkipPlainImageNames(t *testing.T) {
	steps := []Step{
		{Seq: 1, Name: "flash", Outcome: StepOK, Details: map[string]any{"image": "mlx/fw.bin", "sha256": "ab"}},
		{Seq: 2, Name: "flash-glance", Outcome: StepOK, Details: map[string]any{"image": map[string]any{"id": "g1", "hash_algo": "sha512", "source": "glance"}}},
	}
	rec := buildRecord(Run{ID: "r1"}, steps)
	if len(rec.Images) != 1 || rec.Images[0].ID != "g1" || rec.Images[0].Step != "flash-glance" {
		t.Fatalf("images %+v, want only the Glance image of flash-glance", rec.Images)
	}
}

// What fpga-program read before programming reaches the record's images:
// each region's id before and whether it changed, and programming_proven,
// false when a region reported the golden id already (its read-back
// proves no write) or when the step failed.
func TestRecordImageSaysWhetherProgrammingIsProven(t *testing.T) {
	readback := func(proven bool, change string) map[string]any {
		rb := map[string]any{"expected": "0x23", "result": "passed", "programming_proven": proven, "regions": []any{
			map[string]any{"region": "region1", "before": "0xtenant", "reported": "0x23", "source": "sysfs", "result": "passed", "change": change}}}
		if !proven {
			rb["note"] = "unchanged: regions [region1] reported the golden id"
		}
		return rb
	}
	steps := []Step{
		{Seq: 1, Name: "program", Outcome: StepOK, Details: map[string]any{"readback": readback(true, "changed")}},
		{Seq: 2, Name: "program", Outcome: StepOK, Details: map[string]any{"readback": readback(false, "unchanged")}},
		{Seq: 3, Name: "program", Outcome: StepFailed, Details: map[string]any{"readback": readback(true, "changed")}},
	}
	rec := buildRecord(Run{ID: "r1"}, steps)
	if len(rec.Images) != 3 {
		t.Fatalf("images %+v", rec.Images)
	}
	for i, want := range []struct {
		proven bool
		change string
		note   bool
	}{{true, "changed", false}, {false, "unchanged", true}, {false, "changed", false}} {
		rb := rec.Images[i].Readback
		if rb.ProgrammingProven == nil || *rb.ProgrammingProven != want.proven || rb.Regions[0].Before != "0xtenant" || rb.Regions[0].Change != want.change || (rb.Note != "") != want.note {
			t.Errorf("image %d: readback %+v (proven %v), want proven %v, change %s", i, rb, rb.ProgrammingProven, want.proven, want.change)
		}
	}
}
