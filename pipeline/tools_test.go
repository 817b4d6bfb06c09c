package pipeline

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
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
	e, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: be, Checkpoints: NewMemCheckpoints(), Registerer: prometheus.NewRegistry(),
		Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Clean(context.Background(), target(1))
	if err != nil || res.Verdict != VerdictClean || len(res.Steps) != 1 {
		t.Fatalf("Clean = %+v, %v", res, err)
	}
	want := map[string]any{hardware.ToolNVMeCLI: "nvme version 2.4"}
	if diff := cmp.Diff(want, res.Steps[0].Details[ExternalToolsKey]); diff != "" {
		t.Errorf("external tools (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{hardware.ToolNVMeCLI}}, be.asked); diff != "" {
		t.Errorf("tools asked (-want +got):\n%s", diff)
	}
}
