#!/bin/sh
# Regenerates testdata/sys: a fake sysfs that copies the kernel layout,
# symlinks included, for six PCI functions:
#   0000:01:00.0 Samsung PM9A3 NVMe, bound to nvme (nvme0, one namespace)
#   0000:81:00.0 KIOXIA CM6 NVMe, bound to nvme (nvme1, two namespaces)
#   0000:02:00.0 Solidigm D7-P5510 NVMe, bound to vfio-pci (no controller)
#   0000:41:00.0 NVIDIA A100-SXM4-40GB, bound to nvidia
#   0000:3b:00.0 Mellanox ConnectX-6 Dx, bound to mlx5_core, SR-IOV 8 VFs
#   0000:00:1f.4 Intel SMBus controller: no reset file, numa_node -1
# Usage: sh mksys.sh [DIR]   (default: the directory of this script)/sys
set -eu
ROOT=${1:-$(dirname "$0")/sys}
rm -rf "$ROOT"
mkdir -p "$ROOT/bus/pci/devices" "$ROOT/bus/pci/drivers" "$ROOT/kernel/iommu_groups" "$ROOT/block"
: >"$ROOT/bus/pci/drivers_probe"
: >"$ROOT/bus/pci/rescan"

# dev BRIDGE ADDR VENDOR DEVICE SVENDOR SDEVICE CLASS DRIVER IOMMU NUMA RESET
dev() {
	bridge=$1 addr=$2
	if [ "$bridge" = "-" ]; then
		rel="pci0000:$(echo "$addr" | cut -d: -f2)/$addr"
	else
		rel="pci0000:$(echo "$bridge" | cut -d: -f2)/$bridge/$addr"
	fi
	d="$ROOT/devices/$rel"
	mkdir -p "$d"
	printf '%s\n' "$3" >"$d/vendor"
	printf '%s\n' "$4" >"$d/device"
	printf '%s\n' "$5" >"$d/subsystem_vendor"
	printf '%s\n' "$6" >"$d/subsystem_device"
	printf '%s\n' "$7" >"$d/class"
	printf '%s\n' "${10}" >"$d/numa_node"
	: >"$d/driver_override"
	: >"$d/remove"
	[ "${11}" = reset ] && : >"$d/reset"
	up=$(echo "devices/$rel" | sed 's|[^/]*|..|g')
	if [ "$8" != "-" ]; then
		mkdir -p "$ROOT/bus/pci/drivers/$8"
		: >"$ROOT/bus/pci/drivers/$8/bind"
		: >"$ROOT/bus/pci/drivers/$8/unbind"
		ln -s "$up/bus/pci/drivers/$8" "$d/driver"
		ln -sf "$(echo "bus/pci/drivers/$8" | sed 's|[^/]*|..|g')/devices/$rel" "$ROOT/bus/pci/drivers/$8/$addr"
	fi
	if [ "$9" != "-" ]; then
		mkdir -p "$ROOT/kernel/iommu_groups/$9/devices"
		ln -s "$up/kernel/iommu_groups/$9" "$d/iommu_group"
		ln -s "../../../../devices/$rel" "$ROOT/kernel/iommu_groups/$9/devices/$addr"
	fi
	ln -s "../../../devices/$rel" "$ROOT/bus/pci/devices/$addr"
	DEVDIR=$d REL=$rel
}

# nvmectl CTRL MODEL SERIAL FW
nvmectl() {
	c="$DEVDIR/nvme/$1"
	mkdir -p "$c"
	printf '%s\n' "$2" >"$c/model"
	printf '%s\n' "$3" >"$c/serial"
	printf '%s\n' "$4" >"$c/firmware_rev"
	printf 'pcie\n' >"$c/transport"
	printf 'live\n' >"$c/state"
}

# nvmens CTRL NS SECTORS
nvmens() {
	n="$DEVDIR/nvme/$1/$2"
	mkdir -p "$n/queue"
	printf '%s\n' "$3" >"$n/size"
	printf '512\n' >"$n/queue/logical_block_size"
	ln -s "../devices/$REL/nvme/$1/$2" "$ROOT/block/$2"
}

dev 0000:00:01.1 0000:01:00.0 0x144d 0xa80a 0x144d 0xa813 0x010802 nvme 14 0 reset
nvmectl nvme0 "SAMSUNG MZQL23T8HCLS-00A07" S64GNE0R600123 GDC5602Q
nvmens nvme0 nvme0n1 7501476528

dev 0000:80:01.1 0000:81:00.0 0x1e0f 0x0007 0x1e0f 0x0001 0x010802 nvme 60 1 reset
nvmectl nvme1 "KIOXIA KCM6XRUL3T84" 71D0A03FT1JE 0106
nvmens nvme1 nvme1n1 3750748848
nvmens nvme1 nvme1n2 3750748848

dev 0000:00:01.2 0000:02:00.0 0x8086 0x0b60 0x8086 0x8008 0x010802 vfio-pci 15 0 reset

dev 0000:40:01.1 0000:41:00.0 0x10de 0x20b0 0x10de 0x134f 0x030200 nvidia 30 1 reset

dev 0000:3a:00.0 0000:3b:00.0 0x15b3 0x101d 0x15b3 0x0016 0x020000 mlx5_core 40 0 reset
printf '8\n' >"$DEVDIR/sriov_totalvfs"
printf '0\n' >"$DEVDIR/sriov_numvfs"

dev - 0000:00:1f.4 0x8086 0xa323 0x8086 0x0000 0x0c0500 i801_smbus 9 -1 noreset
