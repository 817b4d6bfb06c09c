package glance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins"
)

// firmware-flash naming a Glance image: the verified bytes are put under
// the kernel's firmware directory (scour-images/<algo>-<hash>.bin),
// flashed and activated, and the step records the Glance image. Tampered
// with in Glance's store: refused, nothing flashed, retry later.
func TestFirmwareFlashFromGlance(t *testing.T) {
	t.Parallel()
	g := harness.StartGlance(t)
	model := unique()
	data := randomImage(t, 256<<10)
	id := g.Upload(t, harness.GlanceImage{Name: "cx6-fw-23.0.1", Properties: map[string]string{"scour_nic_model": model}, Data: data})
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{
		StateDir: t.TempDir(), Step: time.Millisecond, Devices: []hardware.SimDevice{
			{Address: "0000:3b:00.0", Kind: hardware.KindNIC, NICFirmware: map[string]string{"fw": "22.0"}},
		}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pipeline.ParseConfig(fmt.Appendf(nil, `
profiles:
  - name: nic
    match: {kinds: [nic]}
    pipeline:
      name: nic-firmware
      category: no-erase # a flash and no erase: this NIC holds no tenant data
      steps:
        - {name: flash, type: firmware-flash, args: {image: {glance_query: {properties: {scour_nic_model: %q}}}, version: "23.0.1", settle: 1s}}
`, model))
	if err != nil {
		t.Fatal(err)
	}
	clean := func() *pipeline.Result {
		t.Helper()
		return cleanWith(t, g, s, cfg, pipeline.NewMemCheckpoints(), "0000:3b:00.0")
	}
	running := func() string {
		v, _ := s.FirmwareVersions(t.Context(), "0000:3b:00.0")
		return v["fw"]
	}

	// Tampered first: nothing flashed.
	g.Tamper(t, id, 1000)
	res := clean()
	if res.Verdict != pipeline.VerdictRetryLater || res.Code != plugins.CodeInvalidConfig || running() != "22.0" {
		t.Fatalf("tampered firmware: %s (code %d), running %s; want retry later, code 3, still 22.0", res, res.Code, running())
	}
	if fmt.Sprint(res.Steps[0].Details["image_refused"]) != "hash_mismatch" {
		t.Fatalf("details %v, want image_refused hash_mismatch", res.Steps[0].Details)
	}

	// Put right (re-uploaded as an operator would, the broken one deactivated).
	g.Deactivate(t, id)
	good := g.Upload(t, harness.GlanceImage{Name: "cx6-fw-23.0.1", Properties: map[string]string{"scour_nic_model": model}, Data: data})
	res = clean()
	if res.Verdict != pipeline.VerdictClean || running() != "23.0.1" {
		t.Fatalf("good firmware: %s, running %s", res, running())
	}
	d := res.Steps[0].Details
	img, _ := d["image"].(map[string]any)
	if img["id"] != good || img["hash_algo"] != "sha512" || img["source"] != "glance" {
		t.Fatalf("flash step records image %v, want Glance image %s", img, good)
	}
	staged := filepath.Join(s.FirmwareDir(), fmt.Sprint(d["image_name"]))
	if got, _ := os.ReadFile(staged); string(got) != string(data) || d["image_file"] != staged {
		t.Fatalf("the file flashed (%v, staged %s) does not hold the Glance image's bytes", d["image_file"], staged)
	}
}
