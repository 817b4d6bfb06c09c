#!/bin/sh
# PID 1 of the real-kernel lane's guest (scripts/kernel-lane.sh packs it as
# /init). It sets the machine up as a passthrough host has it (every NVMe
# controller bound to vfio-pci before nvme can claim it), runs what the
# kernel command line asks for, reports on the second serial port (ttyS1,
# read by kernellane's host tests) and powers off.
#   scour.run=tests   run /tests/guest.test (-test.run from scour.test=...)
#   scour.run=scourd  network up (eth0 10.0.2.15), then /scour/etc/run.sh,
#                     which the host test supplies with scourd's config
#   scour.run=bench   the overwrite benchmark on the first controller
#   scour.run=probe   report and power off at once (the host's KVM probe)
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /tmp /run /var/lib/scour
mount -t tmpfs tmpfs /tmp
export SCOUR_KERNEL_GUEST=1 HOME=/tmp
out=/dev/ttyS1
report() { echo "$*" >"$out"; }
fail() { report "SCOUR-GUEST-FAIL $*"; sync; poweroff -f; }

run= test=
for arg in $(cat /proc/cmdline); do
	case $arg in
	scour.run=*) run=${arg#scour.run=} ;;
	scour.test=*) test=${arg#scour.test=} ;;
	esac
done
[ "$run" = probe ] && { report "SCOUR-GUEST-PROBE ok"; poweroff -f; }

# Passthrough host: NVMe controllers (class 0x0108xx) go to vfio-pci.
for d in /sys/bus/pci/devices/*; do
	case $(cat "$d/class") in 0x0108*) echo vfio-pci >"$d/driver_override" ;; esac
done
for m in $(cat /lib/modules/order); do
	insmod "/lib/modules/$m" || fail "insmod $m"
done
for d in /sys/bus/pci/devices/*; do
	case $(cat "$d/class") in 0x0108*) echo "${d##*/}" >/sys/bus/pci/drivers_probe ;; esac
done
report "SCOUR-GUEST-BOOTED $(cut -d' ' -f1 /proc/uptime)"

case $run in
tests)
	cd /tmp
	report "SCOUR-GUEST-BEGIN tests"
	/tests/guest.test -test.v -test.count=1 -test.timeout=8m ${test:+-test.run=$test} >"$out" 2>&1
	report "SCOUR-GUEST-EXIT $?"
	;;
scourd)
	for m in $(cat /lib/modules/net.order); do
		insmod "/lib/modules/$m" || fail "insmod $m"
	done
	ip link set lo up
	ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 || fail "no eth0"
	[ -x /scour/etc/run.sh ] || fail "no /scour/etc/run.sh from the host"
	report "SCOUR-GUEST-BEGIN scourd"
	/scour/etc/run.sh >"$out" 2>&1
	report "SCOUR-GUEST-EXIT $?"
	;;
bench)
	# make bench-overwrite's guest variant: the first controller on nvme,
	# overwrite against dd oflag=direct on its namespace.
	for d in /sys/bus/pci/devices/*; do
		case $(cat "$d/class") in 0x0108*) break ;; esac
	done
	echo nvme >"$d/driver_override"
	echo "${d##*/}" >"$d/driver/unbind"
	echo "${d##*/}" >/sys/bus/pci/drivers_probe
	i=0
	until [ -b /dev/nvme0n1 ]; do i=$((i+1)); [ $i -gt 200 ] && fail "no /dev/nvme0n1"; sleep 0.1; done
	report "SCOUR-GUEST-BEGIN bench"
	cd /tmp
	SCOUR_BENCH_DEVICE=/dev/nvme0n1 /tests/builtin.test -test.run '^$' -test.bench '^BenchmarkOverwriteVsDD$' -test.benchtime 1x >"$out" 2>&1
	report "SCOUR-GUEST-EXIT $?"
	;;
*) fail "unknown scour.run=$run" ;;
esac
sync
poweroff -f
