package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/scour-project/scour/claims"
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
	for _, args := range [][]string{
		{"records", "export", "--state-path", signedDir, "--device", "0000:81:00.0", "--all"},
		{"records", "export", "--state-path", plainDir, "--device", "rp-nvme-0", "--all"},
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
