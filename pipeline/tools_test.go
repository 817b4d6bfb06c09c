package pipeline

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

type versionedBackend struct {
	*fakehw.Backend
	asked [][]string
}

func (b *versionedBackend) ToolVersions(_ context.Context, names []string) map[string]string {
	b.asked = append(b.asked, names)
	return map[string]string{hardware.ToolNVMeCLI: "nvme version 2.4"}
}

// TestBuiltinStepRecordsExternalToolVersions: a built-in step that runs
// nvme-cli records which nvme-cli, as the backend reports it.
func TestBuiltinStepRecordsExternalToolVersions(t *testing.T) {
	be := &versionedBackend{Backend: &fakehw.Backend{
		DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
			d := nvmeDevice(a)
			d.Driver = "nvme"
			return d, nil
		},
		SmartLogF: func(context.Context, hardware.Address) (*hardware.SmartLog, error) {
			return &hardware.SmartLog{AvailSpare: 100, SpareThresh: 10}, nil
		},
	}}
	cfg := testConfig(Step{Name: "wear", Type: "nvme-wear-check"})
	cfg.Profiles[0].Pipeline.HomeDriver = "nvme"
	cfg.Profiles[0].Pipeline.Category = CategoryNoErase // a wear check alone erases nothing
	e, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: be, Checkpoints: NewMemCheckpoints(), Registerer: prometheus.NewRegistry(),
		Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	// A wear check alone erases nothing: the run of this no-erase
	// pipeline on an NVMe is refused clean (unerased); the step's record
	// is what this test looks at.
	res, err := e.Clean(context.Background(), target(1))
	if err != nil || len(res.Steps) != 1 || res.Steps[0].State != StepSucceeded {
		t.Fatalf("Clean = %+v, %v; want the wear check succeeded", res, err)
	}
	want := map[string]any{hardware.ToolNVMeCLI: "nvme version 2.4"}
	if diff := cmp.Diff(want, res.Steps[0].Details[ExternalToolsKey]); diff != "" {
		t.Errorf("external tools (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{hardware.ToolNVMeCLI}}, be.asked); diff != "" {
		t.Errorf("tools asked (-want +got):\n%s", diff)
	}
}

// TestPluginToolIsWhatTheRunnerStarted: the record names the plugin by
// the SHA-256 the runner read just before starting it, not by whatever
// file sits at the path when the step ends (replaced during a long step).
func TestPluginToolIsWhatTheRunnerStarted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wipe")
	const started = "1111111111111111111111111111111111111111111111111111111111111111"
	cfg := testConfig(Step{Name: "wipe", Type: TypePlugin, Path: path})
	cfg.PluginDirs = []string{dir}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho started\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg)
	h.pr.clean[path] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		// Replaced while the step runs: the file now hashes otherwise.
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho replaced\n"), 0o755); err != nil {
			t.Error(err)
		}
		return &plugins.Result{Status: plugins.StatusOK, SHA256: started}, nil
	}
	res := h.clean(t, target(1))
	if res.Verdict != VerdictClean {
		t.Fatalf("verdict %s: %s", res.Verdict, res.Reason)
	}
	want := map[string]any{"name": "plugin", "path": path, "sha256": started}
	if diff := cmp.Diff(want, res.Steps[0].Details[ToolKey]); diff != "" {
		t.Errorf("tool (-want +got):\n%s", diff)
	}
}

// TestStepsNotRunNameNoTool: a step skipped, or refused by its plugin's
// CHECK, ran no tool, so it names none; a step that ran does.
func TestStepsNotRunNameNoTool(t *testing.T) {
	cfg := testConfig(pluginStep("refused", func(s *Step) { s.OnUnsupported = OnUnsupportedSkip }),
		pluginStep("unmet", func(s *Step) { s.Requires = Requires{"pci.iommu": true} }), // nvmeDevice lacks it
		pluginStep("wipe"))
	cfg.Profiles[0].Pipeline.Steps[1].Required = new(bool) // optional: the run goes on
	h := newHarness(t, cfg)
	h.pr.check["refused"] = func(context.Context, *plugins.Request) (*plugins.Result, error) {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "not this drive")
	}
	res := h.clean(t, target(1))
	if got := states(res.Steps); got != "refused=skipped unmet=failed wipe=succeeded" {
		t.Fatalf("steps: %s (verdict %s: %s)", got, res.Verdict, res.Reason)
	}
	for _, rec := range res.Steps[:2] {
		if tool, ok := rec.Details[ToolKey]; ok {
			t.Errorf("step %s did not run but names tool %v", rec.Name, tool)
		}
	}
	if _, ok := res.Steps[2].Details[ToolKey]; !ok {
		t.Errorf("step wipe ran but names no tool: %v", res.Steps[2].Details)
	}
}
