// Package guest holds the tests the real-kernel lane runs inside its QEMU
// guest (build tag kernelguest): scour's real hardware backend against
// Debian's kernel, sysfs, nvme-cli and QEMU's emulated NVMe controllers.
// They write to the machine's PCI devices, so they only build with the tag
// and refuse to run outside the lane's guest (SCOUR_KERNEL_GUEST=1 is set by
// its /init).
package guest
