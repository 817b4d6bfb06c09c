// Command scour-gpu-scrub is scour's built-in NVIDIA GPU memory scrubber
// (package hardware/gpu), run by scourd for gpu-scrub steps. It is a
// separate program because loading libcuda needs the dynamic loader and
// libc, while scourd and scourctl stay fully static; and because a driver
// call that hangs can only be ended by killing the process, which scourd
// does when the step's timeout passes.
//
//	scour-gpu-scrub [-min-coverage 0.97] [-cuda-library P] [-nvml-library P] <pci address>
//	scour-gpu-scrub -check     # only load the libraries
//	scour-gpu-scrub -fill 0x5c <addr>      # proving only: leave a pattern in all free memory
//	scour-gpu-scrub -residue 0x5c <addr>   # proving only: count it (and non-zero bytes) without writing
//
// It prints one JSON object, {"details": {...}, "error": "...", "class":
// "..."}, and exits 0 when all the memory it could allocate, at least
// -min-coverage of what CUDA reports, was zeroed and verified (the details
// say how much, and how much was not covered), 2 when the scrub is
// unsupported here (no driver libraries, GPU not visible), 3 when memory
// read back non-zero, NVML's health gate failed, or the memory CUDA shows
// may be a slice of the GPU (MIG), 1 otherwise.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/scour-project/scour/hardware/gpu"
)

// Exit codes and classes; hardware.Real reads them.
const (
	exitFailed      = 1
	exitUnsupported = 2
	exitPermanent   = 3
)

type output struct {
	Details map[string]any `json:"details,omitempty"`
	Error   string         `json:"error,omitempty"`
	Class   string         `json:"class,omitempty"` // unsupported, not_zero, health, scope
}

func main() {
	var o gpu.Options
	check := flag.Bool("check", false, "only load the CUDA library; exit 0 when the built-in scrub can run here")
	fill := flag.String("fill", "", "proving only: write this byte (e.g. 0x5c) into all free memory, as a tenant would leave it")
	residue := flag.String("residue", "", "proving only: count bytes equal to this one, and non-zero bytes, in all free memory without writing it")
	flag.Float64Var(&o.MinCoverage, "min-coverage", gpu.DefaultMinCoverage, "share of the memory CUDA reports that must be zeroed and verified")
	flag.StringVar(&o.CUDALibrary, "cuda-library", gpu.DefaultCUDALibrary, "CUDA driver library")
	flag.StringVar(&o.NVMLLibrary, "nvml-library", gpu.DefaultNVMLLibrary, "NVML library")
	flag.Parse()
	if *check {
		os.Exit(emit(output{}, gpu.Available(o.CUDALibrary)))
	}
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: scour-gpu-scrub [flags] <pci address, e.g. 0000:41:00.0>")
		os.Exit(exitFailed)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *fill != "" || *residue != "" {
		os.Exit(prove(ctx, flag.Arg(0), o, *fill, *residue))
	}
	rep, err := gpu.Scrub(ctx, flag.Arg(0), o, nil)
	os.Exit(emit(output{Details: rep.Details()}, err))
}

// prove runs -fill or -residue (make prove-gpu-scrub drives them).
func prove(ctx context.Context, bus string, o gpu.Options, fill, residue string) int {
	arg := fill + residue
	v, err := strconv.ParseUint(arg, 0, 8)
	if err != nil || fill != "" && residue != "" {
		fmt.Fprintln(os.Stderr, "scour-gpu-scrub: -fill or -residue takes one byte value, e.g. 0x5c")
		return exitFailed
	}
	if fill != "" {
		n, err := gpu.Fill(ctx, bus, o, byte(v))
		return emit(output{Details: map[string]any{"filled_bytes": n}}, err)
	}
	covered, matching, nonZero, err := gpu.Residue(ctx, bus, o, byte(v))
	return emit(output{Details: map[string]any{"covered_bytes": covered, "matching_bytes": matching, "non_zero_bytes": nonZero}}, err)
}

// emit prints the result and returns the exit code.
func emit(out output, err error) int {
	code := 0
	if err != nil {
		out.Error, code = err.Error(), exitFailed
		switch {
		case errors.Is(err, gpu.ErrUnsupported):
			out.Class, code = "unsupported", exitUnsupported
		case errors.Is(err, gpu.ErrNotZero):
			out.Class, code = "not_zero", exitPermanent
		case errors.Is(err, gpu.ErrHealth):
			out.Class, code = "health", exitPermanent
		case errors.Is(err, gpu.ErrScope):
			out.Class, code = "scope", exitPermanent
		}
		fmt.Fprintln(os.Stderr, "scour-gpu-scrub:", err)
	}
	if e := json.NewEncoder(os.Stdout).Encode(out); e != nil && code == 0 {
		code = exitFailed
	}
	return code
}
