// Package gputest builds the stand-in NVIDIA driver libraries
// (testdata/standin.c: the CUDA driver API and NVML subset scour calls,
// over host memory, with fault injection through environment variables)
// for tests and the benchmark harness. It needs gcc:
// scripts/ensure-debian-tools.sh gcc installs it, and `make test` runs that.
package gputest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

//go:embed testdata/standin.c
var source []byte

// BusID is the one GPU the stand-in has unless SCOUR_FAKE_GPU_BUSID says.
const BusID = "0000:41:00.0"

// Libs are paths of the built stand-ins.
type Libs struct{ CUDA, NVML string }

var (
	buildLibs   = sync.OnceValues(build)
	buildHelper = sync.OnceValues(buildHelperBin)
)

// Build compiles the stand-in once per process into a temporary
// directory. A missing gcc fails the test: it must not pass by skipping.
func Build(tb testing.TB) Libs {
	tb.Helper()
	l, err := buildLibs()
	if err != nil {
		tb.Fatalf("stand-in NVIDIA libraries: %v", err)
	}
	return l
}

// Helper builds cmd/scour-gpu-scrub as `make build` does (CGO_ENABLED=0,
// so purego's own dlopen path is what the tests exercise) once per process.
func Helper(tb testing.TB) string {
	tb.Helper()
	h, err := buildHelper()
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func buildHelperBin() (string, error) {
	dir, err := os.MkdirTemp("", "scour-gpu-scrub-")
	if err != nil {
		return "", err
	}
	helper := filepath.Join(dir, "scour-gpu-scrub")
	cmd := exec.Command("go", "build", "-o", helper, "github.com/scour-project/scour/cmd/scour-gpu-scrub")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build scour-gpu-scrub: %v\n%s", err, out)
	}
	return helper, nil
}

func build() (Libs, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return Libs{}, fmt.Errorf("gcc not found (run scripts/ensure-debian-tools.sh gcc, as `make test` does): %w", err)
	}
	dir, err := os.MkdirTemp("", "scour-standin-gpu-")
	if err != nil {
		return Libs{}, err
	}
	src := filepath.Join(dir, "standin.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return Libs{}, err
	}
	l := Libs{CUDA: filepath.Join(dir, "libcuda.so.1"), NVML: filepath.Join(dir, "libnvidia-ml.so.1")}
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", l.CUDA, src).CombinedOutput(); err != nil {
		return Libs{}, fmt.Errorf("gcc: %v\n%s", err, out)
	}
	// One library holds both APIs; NVML gets its own name so tests can
	// take either away.
	if err := os.Link(l.CUDA, l.NVML); err != nil {
		return Libs{}, err
	}
	return l, nil
}
