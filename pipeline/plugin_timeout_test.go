package pipeline

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// A real plugin that spawns a child and sleeps forever is killed, child
// included, when its step times out; the run says retry-later.
func TestPluginTimeoutKillsChildren(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plugins must be root-owned: run as root")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := "#!/bin/sh\ncase \"$SCOUR_COMMAND\" in VERSION) echo '{\"supported_versions\":[\"1.0\"]}'; exit 0;; CHECK) echo '{\"status\":\"ok\"}'; exit 0;; esac\n" +
		"sleep 1000 & echo $! > " + pidFile + "\nwhile :; do sleep 1; done\n"
	path := filepath.Join(dir, "hang")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{PluginDirs: []string{dir}, Profiles: []Profile{{Name: "nvme", Match: Match{ResourceClasses: []string{"*"}},
		Pipeline: Pipeline{Name: "p", Steps: []Step{{Name: "hang", Type: TypePlugin, Path: path, Timeout: 500 * time.Millisecond}}}}}}
	be := &fakehw.Backend{DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) { return nvmeDevice(a), nil }}
	e, err := New(cfg, Options{Backend: be, Checkpoints: NewMemCheckpoints(), Registerer: prometheus.NewRegistry(),
		Logger:      slog.New(slog.DiscardHandler),
		Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Clean(context.Background(), target(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictRetryLater || res.Code != plugins.CodeTimeout {
		t.Fatalf("result %v code %d", res, res.Code)
	}
	testkit.WaitGone(t, pidFile, 3*time.Second) // the plugin's child must not survive the timeout
}
