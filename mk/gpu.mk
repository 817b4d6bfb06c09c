# Built-in GPU scrubber (hardware/gpu, cmd/scour-gpu-scrub): its tests build
# stand-in NVIDIA driver libraries with gcc, installed here when missing so
# `make test` fails rather than skips without it.
.PHONY: gpu-test-tools
test-env: gpu-test-tools

gpu-test-tools:
	bash scripts/ensure-debian-tools.sh gcc
