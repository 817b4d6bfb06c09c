package gpu_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/hardware/gpu/gputest"
)

// TestProveScrubAcrossProcesses (make prove-gpu-scrub GPU=<addr> on a real
// GPU): one process leaves a pattern in all free memory, a second reads it
// back without writing (the residue a new tenant would see), scour-gpu-scrub
// scrubs, and a last process must find none of it. Without
// SCOUR_GPU_BUS_ID it runs on the stand-in driver with its memory in a file
// shared by the processes, which proves the harness, not a GPU.
func TestProveScrubAcrossProcesses(t *testing.T) {
	helper := gputest.Helper(t)
	bus := os.Getenv("SCOUR_GPU_BUS_ID")
	var libs []string
	if bus == "" {
		l := gputest.Build(t)
		bus, libs = gputest.BusID, []string{"-cuda-library", l.CUDA, "-nvml-library", l.NVML}
		t.Setenv("SCOUR_FAKE_GPU_MEM", "67108864")
		t.Setenv("SCOUR_FAKE_GPU_MEMFILE", filepath.Join(t.TempDir(), "gpu-memory"))
	}
	run := func(args ...string) map[string]float64 {
		t.Helper()
		out, err := exec.Command(helper, append(append(libs, args...), bus)...).Output()
		var res struct {
			Details map[string]any `json:"details"`
		}
		if jerr := json.Unmarshal(out, &res); err != nil || jerr != nil {
			t.Fatalf("scour-gpu-scrub %v: %v %v\n%s", args, err, jerr, out)
		}
		nums := map[string]float64{}
		for k, v := range res.Details {
			if f, ok := v.(float64); ok {
				nums[k] = f
			}
		}
		return nums
	}
	filled := run("-fill", "0x5c")["filled_bytes"]
	before := run("-residue", "0x5c")
	t.Logf("filled %.0f bytes; a new process then read %.0f of %.0f bytes still holding 0x5c", filled, before["matching_bytes"], before["covered_bytes"])
	if before["matching_bytes"] < 0.5*before["covered_bytes"] {
		t.Fatalf("inconclusive: only %.0f of %.0f bytes kept the pattern into the next process (the driver cleared memory itself?): nothing for the scrub to prove", before["matching_bytes"], before["covered_bytes"])
	}
	scrub := run()
	after := run("-residue", "0x5c")
	t.Logf("scrub covered %.0f bytes; afterwards %.0f bytes hold 0x5c, %.0f are non-zero", scrub["covered_bytes"], after["matching_bytes"], after["non_zero_bytes"])
	if after["matching_bytes"] != 0 || after["non_zero_bytes"] != 0 {
		t.Errorf("after the scrub a new process still reads %.0f bytes of the pattern, %.0f non-zero", after["matching_bytes"], after["non_zero_bytes"])
	}
}
