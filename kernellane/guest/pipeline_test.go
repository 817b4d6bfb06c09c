//go:build kernelguest

package guest

import (
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/kernellane"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins/builtin"
)

// shipped is where scripts/kernel-lane.sh puts deploy/scour.yaml.
const shipped = "/scour/etc/deploy-scour.yaml"

// cleanAll writes tenant data on every controller, runs cfg's pipeline on
// each through the engine and the claims store, and checks the outcome:
// healthy drives clean with the tenant's data gone, the critical-warning
// drive quarantined by the wear step and wiped by the retirement wipe
// first (the tenant's data gone, the record naming the technique), every
// drive back on vfio-pci, every verdict stored. erase is the technique
// (plugins.EraseKey) every healthy drive's record must name: the one
// step that erased, so a silent switch of technique (a format becoming
// an overwrite) fails here.
func cleanAll(t *testing.T, cfg pipeline.Config, erase string) {
	e, store := engine(t, cfg)
	for _, d := range kernellane.Machine() {
		t.Run(d.Serial, func(t *testing.T) {
			writeTenant(t, d)
			res, err := e.Clean(ctx, target(d))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s (%s) steps %s", d.Serial, res.Verdict, res.Reason, steps(res))
			if drv := driver(d.Addr); drv != "vfio-pci" {
				t.Errorf("left bound to %q, want vfio-pci as before the run", drv)
			}
			run, err := store.GetRun(ctx, res.RunID)
			if err != nil {
				t.Fatalf("run %s not in the claims store: %v", res.RunID, err)
			}
			if d.Warning != 0 {
				if res.Verdict != pipeline.VerdictQuarantine || res.Step != "wear" || run.State != claims.RunQuarantined {
					t.Errorf("critical warning %#x: verdict %s at step %q (stored %s), want quarantine at wear", d.Warning, res.Verdict, res.Step, run.State)
				}
				if rt := res.Retirement; rt == nil || !rt.Wiped || rt.Technique == "" || rt.ReadBack != pipeline.ReadBackPassed {
					t.Errorf("retirement %+v: want the drive wiped before retirement, with the technique named, and read back", rt)
				}
				if hasTenant(t, d) {
					t.Error("the wear gate retired the drive with the tenant's data still on it")
				}
				return
			}
			if res.Verdict != pipeline.VerdictClean || run.State != claims.RunCleaned {
				t.Fatalf("verdict %s (%s) at step %q, stored %s; want clean", res.Verdict, res.Reason, res.Step, run.State)
			}
			if hasTenant(t, d) {
				t.Error("clean verdict, yet the tenant's data is still on the drive")
			}
			var erased []string
			for _, st := range res.Steps {
				if e, ok := builtin.ErasureOf(st.Details); ok {
					erased = append(erased, st.Name+": "+e.ID+" ("+e.Technique+")")
					if e.ID != erase || e.Technique == "" {
						t.Errorf("step %s erased with %s (%q), want %s", st.Name, e.ID, e.Technique, erase)
					}
				}
			}
			if len(erased) != 1 {
				t.Errorf("erasing steps %q, want one (%s)", erased, erase)
			}
			t.Logf("%s erased by %s", d.Serial, erased)
		})
	}
}

// TestFormatPipeline: wear gate, Format NVM (user-data erase) and full
// read-back verification, each step on nvme and the drive back on
// vfio-pci after.
func TestFormatPipeline(t *testing.T) {
	cfg, err := pipeline.ParseConfig([]byte(`
profiles:
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
      name: nvme-format
      version: 1
      steps:
        - {name: wear, type: nvme-wear-check, driver: nvme}
        - {name: format, type: nvme-format, driver: nvme, args: {crypto: false}}
        - {name: verify, type: verify, driver: nvme, args: {mode: all}}
`))
	if err != nil {
		t.Fatal(err)
	}
	cleanAll(t, cfg, "format-ses1")
}

// TestOverwritePipeline: overwrite with O_DIRECT and full verification
// on real block devices of 512 B and 4 KiB logical blocks.
func TestOverwritePipeline(t *testing.T) {
	cfg, err := pipeline.ParseConfig([]byte(`
profiles:
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
      name: nvme-overwrite
      version: 1
      steps:
        - {name: wear, type: nvme-wear-check, driver: nvme}
        - {name: overwrite, type: overwrite, driver: nvme, args: {block_size: 1048576}}
        - {name: verify, type: verify, driver: nvme, args: {mode: all}}
`))
	if err != nil {
		t.Fatal(err)
	}
	cleanAll(t, cfg, "overwrite")
	e, _ := engine(t, cfg)
	d := disk(t, "SCOUR4K")
	writeTenant(t, d)
	res, err := e.Clean(ctx, target(d))
	if err != nil || len(res.Steps) < 2 {
		t.Fatalf("%v %v", res, err)
	}
	media, _ := res.Steps[1].Details["media"].([]any)
	for _, m := range media {
		if mm, _ := m.(map[string]any); mm["direct"] != true {
			t.Errorf("overwrite of %v without O_DIRECT", mm)
		}
	}
	if len(media) == 0 {
		t.Errorf("overwrite step details %v name no media", res.Steps[1].Details)
	}
}

// TestShippedPipeline: deploy/scour.yaml as shipped cleans every healthy
// drive, vfio-bound at the start as on a passthrough host, and
// quarantines the critical-warning one. Its nvme-erase must pick Format
// NVM with a user-data erase on QEMU's controllers (sanicap 0, oacs bit
// 1, fna bit 2 clear), the strongest they offer: not the overwrite
// fallback.
func TestShippedPipeline(t *testing.T) {
	c, err := config.Load(shipped, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	cleanAll(t, c.Pipelines, "format-ses1")
}
