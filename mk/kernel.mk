# The real-kernel lane (docs/e2e.md): Debian's kernel in QEMU with emulated
# NVMe controllers bound to vfio-pci, scour's real hardware backend inside.
.PHONY: kernel-lane test-kernel

# Where scripts/kernel-lane.sh puts the kernel and initramfs of this tree.
KERNEL_LANE ?= $(CURDIR)/.cache/kernel-lane/current

## kernel-lane: install QEMU, nvme-cli, busybox; build the guest's kernel and initramfs.
kernel-lane:
	bash scripts/kernel-lane.sh $(KERNEL_LANE)

## test-kernel: the real-kernel lane alone (kernellane/ boots the guests).
test-kernel: kernel-lane
	SCOUR_KERNEL_LANE=$(KERNEL_LANE) $(GO) test $(TESTFLAGS) ./kernellane/...

# `make test` runs the lane inside its one `go test ./...`.
test-env: kernel-lane
test: export SCOUR_KERNEL_LANE = $(KERNEL_LANE)
