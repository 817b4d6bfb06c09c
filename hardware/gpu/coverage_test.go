package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware/gpu"
	"github.com/scour-project/scour/hardware/gpu/gputest"
)

// The scrub covers what it can allocate, not all device memory, and its
// record says so: the bytes covered of the total, the coverage, and the
// bytes neither written nor read. After the large chunks it keeps
// allocating smaller ones until even a 64 KiB fragment fails, so memory
// left in pieces smaller than the driver's 2 MiB pages is covered too; and
// the default minimum is strict (0.97): a scrub that left 4 % unreached,
// which passed with 0.95 (found in review: "verified: true" over 96.9 %),
// fails unless the step's min_coverage asks for less.
func TestScrubCoverageIsMeasuredAndRecorded(t *testing.T) {
	// 62.5 MiB allocatable of 64: 62 MiB in 2 MiB pages and more, then a
	// 512 KiB fragment.
	o := standIn(t, "alloc-limit=65536000", "")
	r, err := gpu.Scrub(context.Background(), gputest.BusID, o, nil)
	if err != nil {
		t.Fatalf("Scrub: %v", err)
	}
	if r.CoveredBytes != 65536000 || r.Fragments != 1 {
		t.Errorf("covered %d bytes in %d fragments; want 65536000 (the last 512 KiB in one fragment)", r.CoveredBytes, r.Fragments)
	}
	d := r.Details()
	if d["uncovered_bytes"] != uint64(64*mib-65536000) || d["covered_bytes"] != uint64(65536000) || d["total_bytes"] != uint64(64*mib) {
		t.Errorf("details %v: want covered, uncovered and total bytes", d)
	}
	for _, k := range []string{"verification", "not_covered"} {
		if s := fmt.Sprint(d[k]); !strings.Contains(s, "of the") || strings.Contains(s, "all device memory") && !strings.Contains(s, "not all device memory") {
			t.Errorf("%s = %q: want the share covered, never a claim of all device memory", k, s)
		}
	}
	if !strings.Contains(fmt.Sprint(d["not_covered"]), fmt.Sprint(64*mib-65536000)) {
		t.Errorf("not_covered %q does not give the bytes not reached", d["not_covered"])
	}

	// cuMemGetInfo counting 1 MiB less free than can be allocated: the
	// scrub allocates until allocation fails, not up to its word.
	o = standIn(t, "free-low=1048576", "")
	if r, err = gpu.Scrub(context.Background(), gputest.BusID, o, nil); err != nil || r.CoveredBytes != 63*mib || r.FreeBytes != 62*mib {
		t.Errorf("free understated by 1 MiB: %v, covered %d (want 63 MiB), free %d", err, r.CoveredBytes, r.FreeBytes)
	}

	// 62 MiB of 64 allocatable (96.9 %): below the default minimum.
	o = standIn(t, "alloc-limit=65011712", "")
	r, err = gpu.Scrub(context.Background(), gputest.BusID, o, nil)
	if err == nil || !strings.Contains(err.Error(), "below the minimum 97.00%") || !r.Verified {
		t.Fatalf("96.9 %% covered with the default minimum: %v (verified %v); want a failure after the covered part was scrubbed", err, r.Verified)
	}
	o.MinCoverage = 0.95
	if r, err = gpu.Scrub(context.Background(), gputest.BusID, o, nil); err != nil || r.MinCoverage != 0.95 || r.Details()["min_coverage"] != 0.95 {
		t.Fatalf("96.9 %% covered, minimum 0.95: %v, min_coverage %v", err, r.MinCoverage)
	}
}

// The memory CUDA shows must be the whole GPU's: with MIG on, the bus id
// resolves to one MIG instance, a slice. A scrub refuses (ErrScope,
// permanent: the device stays reserved, quarantined) when NVML says MIG
// is enabled, when it cannot say, or when CUDA reports much less memory
// than NVML says is installed; it writes nothing then. A MIG-capable GPU
// with MIG off, or CUDA reporting a little less than NVML (the driver's
// own reservation), scrubs.
func TestScrubRefusesASliceOfTheGPU(t *testing.T) {
	for _, tc := range []struct {
		name, nvml, nvmlMem string
		refused             string // "" = scrubs
	}{
		{name: "MIG enabled", nvml: "mig-enabled", refused: "MIG mode is enabled"},
		{name: "MIG mode unreadable", nvml: "mig-error", refused: "nvmlDeviceGetMigMode"},
		{name: "CUDA sees half of NVML's memory", nvmlMem: fmt.Sprint(128 * mib), refused: "NVML 134217728 installed"},
		{name: "MIG disabled", nvml: "mig-disabled"},
		{name: "CUDA sees 98 % of NVML's memory", nvmlMem: fmt.Sprint(64 * mib * 100 / 98)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := standIn(t, "", tc.nvml)
			// Device memory outlives processes here: a tenant's pattern
			// left in it shows whether the refused scrub wrote anything.
			t.Setenv("SCOUR_FAKE_GPU_MEMFILE", filepath.Join(t.TempDir(), "gpu-memory"))
			if tc.nvmlMem != "" {
				t.Setenv("SCOUR_FAKE_NVML_MEM", tc.nvmlMem)
			}
			if _, err := gpu.Fill(context.Background(), gputest.BusID, o, 0x5c); err != nil {
				t.Fatal(err)
			}
			r, err := gpu.Scrub(context.Background(), gputest.BusID, o, nil)
			if tc.refused == "" {
				if err != nil || !r.Verified {
					t.Fatalf("Scrub: %v, want it scrubbed", err)
				}
				return
			}
			if !errors.Is(err, gpu.ErrScope) || !strings.Contains(err.Error(), tc.refused) || r.Verified {
				t.Fatalf("Scrub = %v (verified %v), want ErrScope saying %q", err, r.Verified, tc.refused)
			}
			if _, matching, _, err := gpu.Residue(context.Background(), gputest.BusID, o, 0x5c); err != nil || matching == 0 {
				t.Errorf("after the refusal the tenant's pattern is gone (%d bytes left, %v): the refused scrub wrote", matching, err)
			}
		})
	}
}
