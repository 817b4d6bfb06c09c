package glance

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins"
)

// fpga-program naming a Glance image by query. Glance down through more
// runs than max_runs: retry later each time, nothing programmed, never
// quarantined; back up: the run finishes. A good image is programmed and
// recorded (id, name, hash); the same image tampered with in Glance's
// store is refused: nothing is programmed, the run ends "retry later" (the
// device stays reserved, not quarantined) and says why.
func TestFPGAProgramFromGlance(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	model := unique()
	id := g.Upload(t, harness.GlanceImage{Name: "n3000-golden", Tags: []string{"golden"},
		Properties: map[string]string{"scour_model": model, "bitstream_id": "0xgolden"},
		Data:       []byte(sim.BitstreamHeader + "0xgolden\n" + strings.Repeat("x", 1<<16))})

	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{
		StateDir: t.TempDir(), Step: time.Millisecond, Devices: []hardware.SimDevice{
			{Address: "0000:5e:00.0", Kind: hardware.KindFPGA, FPGARegions: 1},
		}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pipeline.ParseConfig(fmt.Appendf(nil, `
profiles:
  - name: fpga
    match: {kinds: [fpga]}
    pipeline:
      name: fpga-golden
      steps:
        - {name: program, type: fpga-program, args: {image: {glance_query: {properties: {scour_model: %q}, tags: [golden]}}}}
        - {name: readback, type: fpga-readback}
`, model))
	if err != nil {
		t.Fatal(err)
	}
	clean := func(cp pipeline.Checkpoints) *pipeline.Result {
		t.Helper()
		return cleanWith(t, g, s, cfg, cp, "0000:5e:00.0")
	}
	loaded := func() string {
		id, _ := s.FPGALoadedID(t.Context(), "0000:5e:00.0", "region0")
		return id
	}

	// Glance answering 500 through more runs than the pipeline's max_runs
	// (3): each ends "retry later", nothing is programmed, the device is
	// never quarantined for the outage; once Glance is back the run
	// resumes and finishes.
	cp := pipeline.NewMemCheckpoints()
	before := loaded()
	g.Inject(harness.Fault{Status: http.StatusInternalServerError})
	for run := range 4 {
		res := clean(cp)
		if res.Verdict != pipeline.VerdictRetryLater || !strings.Contains(res.Reason, "Glance unavailable") || loaded() != before {
			t.Fatalf("run %d with Glance down: %s (%s), region0 holds %q; want retry later, nothing programmed", run+1, res, res.Reason, loaded())
		}
	}
	g.Heal()
	res := clean(cp)
	if res.Verdict != pipeline.VerdictClean || loaded() != "0xgolden" {
		t.Fatalf("good image: %s, region0 holds %q", res, loaded())
	}
	img, _ := res.Steps[0].Details["image"].(map[string]any)
	if img["id"] != id || img["name"] != "n3000-golden" || img["hash_algo"] != "sha512" || img["source"] != "glance" {
		t.Fatalf("program step records image %v, want Glance image %s with its sha512", img, id)
	}

	// Another tenant's bitstream is what the card holds now; the golden
	// image is then tampered with behind Glance's back.
	if err := s.ProgramFPGA(t.Context(), "0000:5e:00.0", "region0", hardware.FPGAImage{Path: writeBitstream(t, "0xtenant")}, nil); err != nil {
		t.Fatal(err)
	}
	g.Tamper(t, id, 100)
	res = clean(pipeline.NewMemCheckpoints())
	if res.Verdict != pipeline.VerdictRetryLater || res.Code != plugins.CodeInvalidConfig {
		t.Fatalf("tampered image: %s (code %d), want retry later with code %d: the device stays reserved, not quarantined", res, res.Code, plugins.CodeInvalidConfig)
	}
	if loaded() != "0xtenant" {
		t.Fatalf("region0 holds %q after a refused image: something was programmed", loaded())
	}
	if !strings.Contains(res.Reason, "hash") || !strings.Contains(res.Reason, id) || fmt.Sprint(res.Steps[0].Details["image_refused"]) != "hash_mismatch" {
		t.Fatalf("reason %q, details %v (%T): want the hash mismatch of %s named", res.Reason, res.Steps[0].Details, res.Steps[0].Details["image_refused"], id)
	}
}

// writeBitstream writes a simulated bitstream carrying id.
func writeBitstream(t *testing.T, id string) string {
	t.Helper()
	p := t.TempDir() + "/tenant.gbs"
	if err := os.WriteFile(p, []byte(sim.BitstreamHeader+id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
