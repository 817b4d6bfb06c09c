package pipeline

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// TestResumeRequiresSameStepDefinitions: a run interrupted after step a
// succeeded is resumed only when the steps are still defined the same
// way. Changing a step's args, driver, required or path without bumping
// the pipeline version must not let the old outcome count: the open run is
// closed superseded and every step runs again.
func TestResumeRequiresSameStepDefinitions(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*Step)
		resumed bool
	}{
		{name: "unchanged", change: func(*Step) {}, resumed: true},
		{name: "args", change: func(s *Step) { s.Args = map[string]any{"passes": 3} }},
		{name: "driver", change: func(s *Step) { s.Driver = "nvme" }},
		{name: "path", change: func(s *Step) { s.Path = pluginDir + "/a2" }},
		{name: "required", change: func(s *Step) { f := false; s.Required = &f }},
		{name: "destructive", change: func(s *Step) { f := false; s.Destructive = &f }},
		{name: "verifies", change: func(s *Step) { s.Verifies = true }}, // review rev1 Low 7
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := testConfig(pluginStep("a", func(s *Step) { s.Args = map[string]any{"passes": 1} }), pluginStep("b"))
			h := newHarness(t, old)
			h.be.BindDriverF = func(context.Context, hardware.Address, string) (string, error) { return "", nil }
			// Run 1: a succeeds, the process dies during b.
			ctx, cancel := context.WithCancel(context.Background())
			h.pr.clean["b"] = func(ctx context.Context, _ *plugins.Request) (*plugins.Result, error) {
				cancel()
				<-ctx.Done()
				return nil, ctx.Err()
			}
			if _, err := h.e.Clean(ctx, target(1)); err == nil {
				t.Fatal("interrupted run reported a verdict")
			}
			// Restart with the changed config, same name and version.
			cfg := testConfig(pluginStep("a", func(s *Step) { s.Args = map[string]any{"passes": 1} }, tc.change), pluginStep("b"))
			pr := newFakeRunner()
			pr.clean["a"] = answer(verificationDetails(plugins.VerifyPassed)) // what a verifying a must report
			e, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: h.be, Checkpoints: h.cp, Plugins: pr,
				Registerer:  prometheus.NewRegistry(),
				Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
			if err != nil {
				t.Fatal(err)
			}
			ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel2()
			res, err := e.Clean(ctx2, target(1))
			if err != nil || res.Verdict != VerdictClean {
				t.Fatalf("second run: %v %v", res, err)
			}
			ranA := slices.ContainsFunc(pr.Calls(), func(c string) bool { return strings.HasPrefix(c, "CLEAN a") })
			if tc.resumed == ranA {
				t.Fatalf("calls %v: want resumed=%v (a re-run only when its definition changed)", pr.Calls(), tc.resumed)
			}
			runs := h.cp.Runs(string(target(1).Address))
			if !tc.resumed && (len(runs) != 2 || !strings.Contains(h.cp.st.Runs[runs[0].ID].Result.Reason, "step definitions")) {
				t.Fatalf("runs %+v: want the first closed superseded", runs)
			}
		})
	}
}
