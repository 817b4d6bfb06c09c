package pipeline

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// TestPluginDeploymentProblemsAreRetryLater: a plugin that is missing,
// badly owned, speaks no common protocol version, cannot start, or is
// configured wrong (codes 1, 3, 4) is a deployment problem, not the
// device's: the device stays reserved and is retried (retry-later, even
// with its run budget spent), never quarantined. Device failures still
// quarantine.
func TestPluginDeploymentProblemsAreRetryLater(t *testing.T) {
	tests := []struct {
		code int
		want Verdict
	}{
		{plugins.CodeIncompatibleVersion, VerdictRetryLater},
		{plugins.CodeInvalidConfig, VerdictRetryLater},
		{plugins.CodeInvalidRequest, VerdictRetryLater},
		{plugins.CodePermanent, VerdictQuarantine},
		{plugins.CodeRetire, VerdictQuarantine},
	}
	for _, tc := range tests {
		for _, priorRuns := range []int{0, 5} {
			h := newHarness(t, testConfig(pluginStep("a")))
			h.pr.clean["a"] = failN(1, tc.code)
			tg := target(1)
			for range priorRuns {
				run, _, _ := h.cp.OpenRun(context.Background(), RunStart{Device: string(tg.Address)})
				h.cp.FinishRun(context.Background(), run.ID, Result{Verdict: VerdictRetryLater})
			}
			res := h.clean(t, tg)
			if res.Verdict != tc.want {
				t.Errorf("code %d after %d runs: verdict %s (%s), want %s", tc.code, priorRuns, res.Verdict, res.Reason, tc.want)
			}
			if tc.want == VerdictRetryLater && !strings.Contains(res.Reason, pluginDir+"/a") {
				t.Errorf("code %d: reason %q does not name the plugin", tc.code, res.Reason)
			}
		}
	}
}

// TestNewRefusesBadPluginDeployment: New checks every plugin step's file
// and protocol version with the real runner and lists every problem, so
// scourd refuses to start instead of failing devices.
func TestNewRefusesBadPluginDeployment(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plugin ownership rules need root-owned files: run the tests as root")
	}
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", `echo '{"supported_versions":["1.0"]}'`, 0o755)
	old := write("old", `echo '{"supported_versions":["0.1"]}'`, 0o755)
	worldW := write("worldw", `echo '{"supported_versions":["1.0"]}'`, 0o757)
	missing := filepath.Join(dir, "missing")
	step := func(name, path string) Step { return Step{Name: name, Type: TypePlugin, Path: path} }
	newEngine := func(steps ...Step) error {
		cfg := testConfig(steps...)
		cfg.PluginDirs = []string{dir}
		_, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Checkpoints: NewMemCheckpoints(),
			Backend:     &fakehw.Backend{DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) { return nvmeDevice(a), nil }},
			Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
		return err
	}
	if err := newEngine(step("good", good)); err != nil {
		t.Fatalf("good plugin refused: %v", err)
	}
	err := newEngine(step("good", good), step("old", old), step("worldw", worldW), step("missing", missing))
	if err == nil {
		t.Fatal("New accepted a bad plugin deployment")
	}
	for _, want := range []string{"step old", "no common", "step worldw", "chmod go-w", "step missing", missing} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "step good") {
		t.Errorf("error blames the good plugin:\n%v", err)
	}
}
