package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
)

// The crash test re-executes the test binary as a child that runs a
// pipeline with a file-backed checkpoint store; TestMain turns the binary
// into that child when SCOUR_CRASH_CHILD is set.
func TestMain(m *testing.M) {
	if os.Getenv("SCOUR_CRASH_CHILD") == "1" {
		crashChild()
		os.Exit(3) // crashChild never returns normally
	}
	os.Exit(m.Run())
}

func crashConfig() Config {
	c := testConfig()
	c.Profiles[0].Pipeline.Steps = []Step{
		{Name: "reset", Type: "pci-reset"},
		{Name: "scrub", Type: "gpu-scrub"},
		{Name: "wear", Type: "nvme-wear-check"},
	}
	return c
}

// crashBackend logs each action as "<who> <action>" to logPath.
func crashBackend(who, logPath string, scrub func()) *fakehw.Backend {
	logf := func(s string) {
		f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			panic(err)
		}
		fmt.Fprintln(f, who+" "+s)
		f.Sync()
		f.Close()
	}
	return &fakehw.Backend{
		DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) { return nvmeDevice(a), nil },
		ResetFunctionF: func(context.Context, hardware.Address) error {
			logf("reset")
			return nil
		},
		ScrubGPUF: func(_ context.Context, _ hardware.Address, p hardware.Progress) error {
			logf("scrub started")
			scrub()
			logf("scrub finished")
			return nil
		},
		SmartLogF: func(context.Context, hardware.Address) (*hardware.SmartLog, error) {
			logf("wear")
			return &hardware.SmartLog{PercentUsed: 3, AvailSpare: 100, SpareThresh: 10}, nil
		},
	}
}

func crashEngine(store string, be hardware.Backend) (*Engine, *MemCheckpoints, error) {
	cp, err := OpenFileCheckpoints(store)
	if err != nil {
		return nil, nil, err
	}
	e, err := New(crashConfig(), Options{Backend: be, Checkpoints: cp, Logger: slog.New(slog.DiscardHandler),
		Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	return e, cp, err
}

func crashChild() {
	be := crashBackend("child", os.Getenv("SCOUR_CRASH_LOG"), func() { select {} }) // hangs mid-step until killed
	e, _, err := crashEngine(os.Getenv("SCOUR_CRASH_STORE"), be)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, err = e.Clean(context.Background(), target(1))
	fmt.Fprintln(os.Stderr, "child: Clean returned", err)
	os.Exit(4)
}

func TestCrashResume(t *testing.T) {
	dir := t.TempDir()
	store, logPath := filepath.Join(dir, "checkpoints.json"), filepath.Join(dir, "actions.log")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SCOUR_CRASH_CHILD=1", "SCOUR_CRASH_STORE="+store, "SCOUR_CRASH_LOG="+logPath)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), "child scrub started") {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("child never reached the scrub step; log %q, stderr %s", b, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL) // crash mid-step
	cmd.Wait()

	be := crashBackend("parent", logPath, func() {})
	e, cp, err := crashEngine(store, be)
	if err != nil {
		t.Fatal(err)
	}
	runs := cp.Runs(string(target(1).Address))
	if len(runs) != 1 {
		t.Fatalf("child stored %d runs, want 1 open run", len(runs))
	}
	res, err := e.Clean(context.Background(), target(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictClean || res.RunID != runs[0].ID || res.Attempt != 1 {
		t.Fatalf("result %v run %s attempt %d; want clean in the child's run %s", res, res.RunID, res.Attempt, runs[0].ID)
	}
	b, _ := os.ReadFile(logPath)
	want := "child reset\nchild scrub started\nparent scrub started\nparent scrub finished\nparent wear\n"
	if string(b) != want {
		t.Fatalf("actions:\n%s\nwant (reset not repeated, scrub re-run from its start):\n%s", b, want)
	}
	if s := states(res.Steps); s != "reset=succeeded scrub=succeeded wear=succeeded" {
		t.Fatalf("steps %s", s)
	}
}
