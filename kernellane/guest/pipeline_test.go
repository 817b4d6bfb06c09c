//go:build kernelguest

package guest

import (
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/kernellane"
	"github.com/scour-project/scour/pipeline"
)

// shipped is where scripts/kernel-lane.sh puts deploy/scour.yaml.
const shipped = "/scour/etc/deploy-scour.yaml"

// cleanAll writes tenant data on every controller, runs cfg's pipeline on
// each through the engine and the claims store, and checks the outcome:
// healthy drives clean with the tenant's data gone, the critical-warning
// drive quarantined by the wear step with its data untouched, every drive
// back on vfio-pci, every verdict stored.
func cleanAll(t *testing.T, cfg pipeline.Config) {
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
				if !hasTenant(t, d) {
					t.Error("the wear gate retired the drive, yet its data was wiped: nothing destructive may run after a failed gate")
				}
				return
			}
			if res.Verdict != pipeline.VerdictClean || run.State != claims.RunCleaned {
				t.Fatalf("verdict %s (%s) at step %q, stored %s; want clean", res.Verdict, res.Reason, res.Step, run.State)
			}
			if hasTenant(t, d) {
				t.Error("clean verdict, yet the tenant's data is still on the drive")
			}
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
	cleanAll(t, cfg)
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
	cleanAll(t, cfg)
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
// quarantines the critical-warning one.
func TestShippedPipeline(t *testing.T) {
	c, err := config.Load(shipped, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	cleanAll(t, c.Pipelines)
}
