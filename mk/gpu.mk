# Built-in GPU scrubber (hardware/gpu, cmd/scour-gpu-scrub): its tests build
# stand-in NVIDIA driver libraries with gcc, installed here when missing so
# `make test` fails rather than skips without it.
.PHONY: gpu-test-tools
test-env: gpu-test-tools

gpu-test-tools:
	bash scripts/ensure-debian-tools.sh gcc

## bench-gpu-scrub: built-in GPU scrub bandwidth vs cuMemsetD8 over the same
## memory, with the ratio. GPU=<pci address> runs it on a real GPU (bound to
## nvidia, idle); without GPU it runs on the stand-in driver, whose numbers
## mean nothing about GPUs (it proves the harness works).
.PHONY: bench-gpu-scrub
bench: bench-gpu-scrub
GPU ?=
bench-gpu-scrub: gpu-test-tools
	SCOUR_GPU_BUS_ID='$(GPU)' $(GO) test -run '^$$' -bench '^BenchmarkScrubVsMemset$$' -benchtime 1x -count 1 ./hardware/gpu

## prove-gpu-scrub: GPU=<pci address> (bound to nvidia, idle): one process
## leaves a pattern in all free memory, a second sees it, scour-gpu-scrub
## scrubs, a last one must find none of it. Without GPU it runs on the
## stand-in driver (as in make test).
.PHONY: prove-gpu-scrub
prove-gpu-scrub: gpu-test-tools
	SCOUR_GPU_BUS_ID='$(GPU)' $(GO) test -count 1 -v -run '^TestProveScrubAcrossProcesses$$' ./hardware/gpu
