# The real-kernel lane (docs/e2e.md): Debian's kernel in QEMU with emulated
# NVMe controllers bound to vfio-pci, scour's real hardware backend inside.
.PHONY: kernel-lane test-kernel

# Where scripts/kernel-lane.sh puts the kernel and initramfs of this tree.
KERNEL_LANE ?= $(CURDIR)/.cache/kernel-lane/current

## kernel-lane: install QEMU, nvme-cli, busybox; build the guest's kernel and initramfs.
kernel-lane:
	bash scripts/kernel-lane.sh $(KERNEL_LANE)

## test-kernel: the real-kernel lane alone (kernellane/ boots the guests; scourd end to end needs the e2e containers too).
test-kernel: kernel-lane e2e-env
	SCOUR_KERNEL_LANE=$(KERNEL_LANE) $(GO) test $(TESTFLAGS) ./kernellane/...

# `make test` runs the lane inside its one `go test ./...`.
test-env: kernel-lane
test: export SCOUR_KERNEL_LANE = $(KERNEL_LANE)

# make bench-overwrite's guest variant: the same benchmark on an emulated
# NVMe namespace of the lane's guest (plugins/builtin's runs on the host).
bench-overwrite: bench-overwrite-guest
.PHONY: bench-overwrite-guest
## bench-overwrite-guest: overwrite vs dd oflag=direct on a QEMU NVMe block device in the guest (ratio, target >= 0.9).
bench-overwrite-guest: kernel-lane
	SCOUR_KERNEL_LANE=$(KERNEL_LANE) $(GO) test -count=1 -run '^$$' -bench '^BenchmarkGuestOverwriteVsDD$$' -benchtime 1x ./kernellane
