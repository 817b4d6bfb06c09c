package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/e2e/harness"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
)

// fpgaAddr is the simulated FPGA (an N3000 with two regions) of these tests.
const fpgaAddr = "0000:5e:00.0"

// withGlanceFPGA gives scourd Glance (images.glance.endpoint, the test's
// proxy) and an fpga profile that puts back the one active Glance image
// with scour_model model and the scour-golden tag, as docs/images.md
// tells an operator to configure it: program, reset, read back, clear the
// card's memory. max_runs 2: a refused image must not use it up.
func withGlanceFPGA(g *harness.Glance, model string) HostOption {
	return func(cfg map[string]any) {
		cfg["images"] = map[string]any{
			"glance": map[string]any{"endpoint": g.URL(), "attempts": 2, "backoff": "100ms",
				"owners": []string{harness.GlanceOwner}, // the operator's project (docs/images.md, Trusted projects)
				// The harness's Glance and Keystone speak plain http on this
				// host (docs/images.md, Transport).
				"allow_insecure_images": true},
			"cache_max_bytes": 64 << 20,
		}
		p := cfg["pipelines"].(map[string]any)
		p["profiles"] = append(p["profiles"].([]map[string]any), map[string]any{
			"name": "fpga", "match": map[string]any{"kinds": []string{"fpga"}},
			"pipeline": map[string]any{"name": "fpga-golden", "version": 1, "max_runs": 2, "steps": []map[string]any{
				{"name": "program", "type": "fpga-program", "timeout": "2m", "args": map[string]any{
					"image": map[string]any{"glance_query": map[string]any{
						"properties": map[string]string{"scour_model": model}, "tags": []string{"scour-golden"}}}}},
				{"name": "reset", "type": "pci-reset", "requires": map[string]any{"pci.reset": true}, "on_unsupported": "skip"},
				{"name": "readback", "type": "fpga-readback"},
				{"name": "clear-memory", "type": "fpga-clear-memory", "on_unsupported": "skip"},
			}},
		})
	}
}

// goldenBitstream is a simulated bitstream that reports id once loaded,
// padded to 64 KiB so the download streams.
func goldenBitstream(id string) []byte {
	return []byte(sim.BitstreamHeader + id + "\n" + strings.Repeat("g", 64<<10))
}

// uploadGolden uploads a golden image for model as an operator would
// (docs/images.md): its bitstream_id property, the scour-golden tag.
func uploadGolden(t *testing.T, g *harness.Glance, name, model, bitstreamID string) (id string, data []byte) {
	t.Helper()
	data = goldenBitstream(bitstreamID)
	id = g.Upload(t, harness.GlanceImage{Name: name, Tags: []string{"scour-golden"},
		Properties: map[string]string{"scour_model": model, "bitstream_id": bitstreamID}, Data: data})
	return id, data
}

// hostSim opens h's simulated hardware from this test process, from the
// hardware section of h's scourd configuration: the same state directory
// scourd's simulator keeps the card's regions in. The tenant's own tool
// loads bitstreams through it; the test reads the regions back through it.
func hostSim(t *testing.T, h *Host) *sim.Simulator {
	t.Helper()
	b, err := os.ReadFile(h.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Hardware hardware.Config `yaml:"hardware"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("hardware section of %s: %v", h.config, err)
	}
	s, err := sim.New(cfg.Hardware, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// loadTenantBitstream plays the tenant loading its own bitstream into
// every region of the card it holds.
func loadTenantBitstream(t *testing.T, s *sim.Simulator, id string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tenant.gbs")
	if err := os.WriteFile(p, []byte(sim.BitstreamHeader+id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.ProgramFPGA(t.Context(), fpgaAddr, "", hardware.FPGAImage{Path: p}, nil); err != nil {
		t.Fatalf("the tenant loading its bitstream: %v", err)
	}
}

// tenantLoadsBitstream boots an instance with the card on h, waits for
// its claim and loads the tenant's bitstream ("0xtenant-" and the
// instance's first 8 characters) into the card: the instance and the
// bitstream's id.
func tenantLoadsBitstream(t *testing.T, c *Cloud, h *Host, s *sim.Simulator) (inst, tenant string) {
	t.Helper()
	inst = harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, fpgaAddr)
	waitClaim(t, h, inst)
	tenant = "0xtenant-" + inst[:8]
	loadTenantBitstream(t, s, tenant)
	return inst, tenant
}

// regions is what each region of the card reports now.
func regions(t *testing.T, s *sim.Simulator) []string {
	t.Helper()
	var out []string
	for _, r := range []string{"region0", "region1"} {
		id, err := s.FPGALoadedID(t.Context(), fpgaAddr, r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// parseRecord reads one exported record as claims.Record.
func parseRecord(t *testing.T, rec map[string]any) claims.Record {
	t.Helper()
	b, _ := json.Marshal(rec)
	r, err := claims.ParseRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Issue 28, through scourd, RabbitMQ, the real Placement and the real
// Glance: an operator uploads the golden bitstream with its bitstream_id;
// a tenant's instance holds the simulated FPGA and loads its own
// bitstream; the instance is deleted. scourd fetches the image Glance's
// query names, verifies it against Glance's sha512, programs it, reads
// every region back, stores the signed record naming the image, and only
// then returns the card to the pool.
func TestE2EFPGAGoldenImageFromGlance(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	g := harness.StartGlance(t)
	model := harness.UniqueName("n3000")
	golden := "0xgolden-" + model
	imgID, data := uploadGolden(t, g, "n3000-golden-"+model, model, golden)
	h := c.AddHost(t, []SimDevice{{Address: fpgaAddr, Kind: "fpga"}}, WithReconcileInterval(time.Hour), withGlanceFPGA(g, model))
	card, s := h.Device(fpgaAddr), hostSim(t, h)

	inst, tenant := tenantLoadsBitstream(t, c, h, s)
	if got := regions(t, s); got[0] != tenant || got[1] != tenant {
		t.Fatalf("regions after the tenant's load: %v, want %s in both", got, tenant)
	}

	c.Delete(t, h, inst, harness.Versioned)
	c.WaitAvailable(t, h, fpgaAddr, 90*time.Second)
	if got := regions(t, s); got[0] != golden || got[1] != golden {
		t.Fatalf("card returned to the pool holding %v, want the golden %s in every region", got, golden)
	}
	if c.Quarantined(t, card) {
		t.Error("the card carries the quarantine trait after a good clean")
	}

	recs := h.Records(t, fpgaAddr)
	if len(recs) != 1 {
		t.Fatalf("want 1 cleaning record, got %d: %v", len(recs), recs)
	}
	rec := parseRecord(t, recs[0])
	if rec.Result.State != "returned" || rec.PreviousTenant.InstanceUUID != inst || rec.Device.PCIAddress != fpgaAddr {
		t.Fatalf("record: state %s, previous tenant %s, device %s; want returned, %s, %s", rec.Result.State, rec.PreviousTenant.InstanceUUID, rec.Device.PCIAddress, inst, fpgaAddr)
	}
	meta := g.Image(t, imgID)
	var program, readback *claims.RecordImage
	for i := range rec.Images {
		switch rec.Images[i].Step {
		case "program":
			program = &rec.Images[i]
		case "readback":
			readback = &rec.Images[i]
		}
	}
	if program == nil || readback == nil {
		t.Fatalf("record images %+v: want the program step's image and the readback step's read-back", rec.Images)
	}
	if program.ID != imgID || program.Name != "n3000-golden-"+model || program.Source != "glance" ||
		program.HashAlgo != meta["os_hash_algo"] || program.HashValue != meta["os_hash_value"] || program.HashAlgo != "sha512" ||
		program.Size != int64(len(data)) || program.Outcome != "ok" {
		t.Errorf("record names image %+v; want Glance image %s (n3000-golden-%s), %s %v, %d bytes", *program, imgID, model, meta["os_hash_algo"], meta["os_hash_value"], len(data))
	}
	for _, im := range []*claims.RecordImage{program, readback} {
		rb := im.Readback
		if rb.Result != "passed" || rb.Expected != golden || len(rb.Regions) != 2 {
			t.Errorf("step %s read-back %+v: want passed, expecting %s, both regions", im.Step, rb, golden)
			continue
		}
		for _, r := range rb.Regions {
			if r.Reported != golden || r.Result != "passed" {
				t.Errorf("step %s: region %s reported %q (%s), want %s passed", im.Step, r.Region, r.Reported, r.Result, golden)
			}
		}
	}
	// The record is signed and chained, and scourctl verifies it.
	if rec.Signature == nil || rec.Chain == nil || rec.Signature.KeyID == "" {
		t.Fatalf("record is not signed and chained: signature %+v, chain %+v", rec.Signature, rec.Chain)
	}
	if out, err := scourctl(t, append([]string{"records", "verify", "--device", fpgaAddr}, h.storeArgs()...)...); err != nil || !strings.Contains(out, "OK: ") {
		t.Fatalf("scourctl records verify --device %s: %v\n%s", fpgaAddr, err, out)
	}
}

// The golden image's stored bytes changed behind Glance's back (its
// record, size and sha512 unchanged): scourd refuses it while it streams,
// programs nothing and keeps the card reserved, run after run beyond the
// pipeline's max_runs, never quarantined; each run's record says why.
// Once the operator uploads a good image and deactivates the bad one, the
// next run puts it back and returns the card.
func TestE2EFPGATamperedGlanceImageKeepsCardReserved(t *testing.T) {
	t.Parallel()
	c := NewCloud(t)
	g := harness.StartGlance(t)
	model := harness.UniqueName("n3000")
	golden := "0xgolden-" + model
	bad, _ := uploadGolden(t, g, "n3000-golden-"+model, model, golden)
	g.Tamper(t, bad, 4096)
	h := c.AddHost(t, []SimDevice{{Address: fpgaAddr, Kind: "fpga"}}, withGlanceFPGA(g, model))
	card, s := h.Device(fpgaAddr), hostSim(t, h)

	inst, tenant := tenantLoadsBitstream(t, c, h, s)
	c.Delete(t, h, inst, harness.Versioned)

	// Three runs (max_runs is 2), each refusing the image.
	var recs []map[string]any
	Eventually(t, 90*time.Second, "three failed runs of the card", func() (bool, string) {
		recs = h.Records(t, fpgaAddr)
		return len(recs) >= 3, fmt.Sprintf("%d records; scourd log tail:\n%s", len(recs), tail(h.Logs(), 20))
	})
	if r := c.Reserved(t, card); r != 1 {
		t.Fatalf("reserved=%d after refused images, want 1: the card holds the tenant's bitstream", r)
	}
	if got := regions(t, s); got[0] != tenant || got[1] != tenant {
		t.Fatalf("regions %v after refused images, want the tenant's %s untouched: something was programmed", got, tenant)
	}
	if c.Quarantined(t, card) {
		t.Fatal("the card was quarantined for an image the operator must fix: a bad image is not the card's fault")
	}
	for _, raw := range recs {
		rec := parseRecord(t, raw)
		if rec.Result.State != "failed" || !containsAll(rec.Result.Summary, bad, "hash mismatch", "nothing is programmed", "stays reserved") {
			t.Fatalf("record of run %s: %s: %q; want failed, naming image %s's hash mismatch", rec.RunID, rec.Result.State, rec.Result.Summary, bad)
		}
		if len(rec.Method.Steps) == 0 || rec.Method.Steps[0].Name != "program" || rec.Method.Steps[0].Details["image_refused"] != "hash_mismatch" {
			t.Fatalf("record of run %s: steps %+v; want program first, refused for hash_mismatch", rec.RunID, rec.Method.Steps)
		}
		for _, im := range rec.Images {
			if im.Readback.Result == "passed" {
				t.Fatalf("record of run %s names a passed read-back %+v of a refused image", rec.RunID, im)
			}
		}
	}
	waitLog(t, h, 10*time.Second, `msg="image refused: nothing is programmed"`, bad, "hash_mismatch")
	if n, _ := aMetric(aMetrics(t, h), "scour_images_refused_total", `reason="hash_mismatch"`); n < 3 {
		t.Errorf("scour_images_refused_total{reason=hash_mismatch} = %v, want >= 3", n)
	}

	// The operator's fix (docs/images.md): upload a good image, deactivate
	// the bad one. The next run programs the good one and returns the card.
	good, _ := uploadGolden(t, g, "n3000-golden-"+model+"-2", model, golden)
	g.Deactivate(t, bad)
	c.WaitAvailable(t, h, fpgaAddr, 90*time.Second)
	if got := regions(t, s); got[0] != golden || got[1] != golden {
		t.Fatalf("card returned holding %v, want %s", got, golden)
	}
	rec := parseRecord(t, h.Records(t, fpgaAddr)[0]) // newest first
	if rec.Result.State != "returned" || len(rec.Images) == 0 || rec.Images[0].ID != good || rec.Images[0].Readback.Result != "passed" {
		t.Fatalf("record of the return: %s, images %+v; want returned with image %s read back", rec.Result.State, rec.Images, good)
	}
}
