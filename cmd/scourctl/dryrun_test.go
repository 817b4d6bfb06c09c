package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPipelineDryRun(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "scour.yaml")
	os.WriteFile(cfg, []byte(`
hardware:
  backend: simulated
  simulator:
    state_dir: `+filepath.Join(dir, "sim")+`
    devices:
      - {address: "0000:81:00.0", kind: nvme, sanicap: 4}
      - {address: "0000:41:00.0", kind: gpu}
pipelines:
  profiles:
    - name: gpu
      match: {kinds: [gpu]}
      pipeline: {name: gpu, steps: [{name: scrub, type: gpu-scrub}]}
    - name: nvme
      match: {resource_classes: [CUSTOM_NVME]}
      pipeline:
        name: nvme
        category: purge
        steps:
          - {name: wear, type: nvme-wear-check}
          - {name: crypto, type: nvme-sanitize, args: {action: crypto}, requires: {nvme.sanitize: ">=crypto"}, on_unsupported: skip}
          - {name: sanitize, type: nvme-sanitize}
          - {name: verify, type: verify}
          - {name: reset, type: pci-reset, requires: {gpu.reset: true}}
`), 0o644)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"pipeline", "dry-run", "--config", cfg, "--device", "81:00.0", "--resource-class", "CUSTOM_NVME"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		`not matched: profile gpu: kind "nvme" not in [gpu]`,
		"profile nvme -> pipeline nvme v1",
		"1. RUN  wear (nvme-wear-check): no requirements",
		"2. SKIP crypto (nvme-sanitize): requirements unmet",
		"3. RUN  sanitize (nvme-sanitize)",
		"destructive: Placement allocation check first",
		"category purge: the record is returned only if a verifying step passes",
		"4. RUN  verify (verify)",
		"verifies: listed under the record's verification",
		"5. FAIL reset (pci-reset): requirements unmet",
		"would stop here",
		// Even after a failing step: what a worn drive's retirement would run.
		"if a step says retire (code 13), the run ends and this retirement wipe runs before the quarantine verdict (no retire_wipe configured: the default for a device of kind nvme)",
		"R. RUN  retire-wipe (nvme-erase)",
		"args: {allow_overwrite: true, crypto: true}",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"pipeline", "dry-run", "--config", cfg, "--device", "41:00.0"}, &out, &errb); code != 0 {
		t.Fatalf("gpu: exit %d: %s", code, errb.String())
	}
	if want := `if a step says retire (code 13): no retirement wipe: none is built in for a device of kind "gpu", and pipeline gpu configures none (retire_wipe); the device would be RETIRED UNWIPED`; !strings.Contains(out.String(), want) {
		t.Errorf("gpu output lacks %q:\n%s", want, out.String())
	}
	// The simulated media still hold tenant data: nothing was touched.
	b, _ := os.ReadFile(filepath.Join(dir, "sim", "0000:81:00.0", "nvme0n1.img"))
	if !bytes.Contains(b, []byte("TENANT-DATA")) {
		t.Errorf("dry run modified the device media")
	}
}
