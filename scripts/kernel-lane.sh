#!/usr/bin/env bash
# Builds what the real-kernel lane (docs/e2e.md, kernellane/) boots: Debian's
# kernel and an initramfs with busybox, nvme-cli and its libraries, the
# modules the guest needs, scour's static binaries and the compiled guest
# tests. Installs QEMU, busybox-static and nvme-cli from Debian when missing.
#
# Usage: scripts/kernel-lane.sh OUTDIR
# Writes OUTDIR/vmlinuz and OUTDIR/initramfs.cpio. The kernel and the base
# archive (everything but scour's binaries) are cached under
# .cache/kernel-lane/<hash of their inputs>; scour's binaries are rebuilt
# every time (go build caches them) and appended as a second cpio archive.
set -euo pipefail

out=${1:?usage: kernel-lane.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- packages -------------------------------------------------------------
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
command -v nvme >/dev/null || missing+=(nvme-cli)
command -v cpio >/dev/null || missing+=(cpio)
# guestfwd runs socat per connection to the e2e containers' 127.0.0.1 ports.
command -v socat >/dev/null || missing+=(socat)
if [ ${#missing[@]} -gt 0 ]; then
	echo "kernel-lane: installing ${missing[*]}"
	sudo_ apt-get update -qq
	sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
busybox=$(dpkg -L busybox-static | grep -m1 '/busybox$')

# The kernel: linux-image-amd64 names the current ABI package.
kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
kpkg=$(kernel_pkg)
[ -n "$kpkg" ] || { sudo_ apt-get update -qq && kpkg=$(kernel_pkg); }
[ -n "$kpkg" ] || { echo "kernel-lane: apt-cache knows no linux-image-amd64 (apt-get update?)" >&2; exit 1; }
kver=$(apt-cache policy "$kpkg" | awk '/Candidate:/{print $2}')

key=$( { echo "$kpkg $kver"; sha256sum "$0" "$root/kernellane/init.sh" "$busybox" "$(command -v nvme)"; } | sha256sum | cut -c1-16)
cache=$root/.cache/kernel-lane/$key
if [ ! -f "$cache/base.cpio" ]; then
	echo "kernel-lane: building base image $key ($kpkg $kver)"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download "$kpkg" >/dev/null 2>&1) || (cd "$tmp" && sudo_ apt-get update -qq && apt-get download "$kpkg" >/dev/null)
	dpkg-deb -x "$tmp"/"$kpkg"_*.deb "$tmp/k"
	kdir=$(ls -d "$tmp"/k/lib/modules/*)
	r=$tmp/root
	mkdir -p "$r"/{bin,sbin,dev,proc,sys,tmp,run,etc,lib/modules,scour,tests}
	cp "$busybox" "$r/bin/busybox"
	for t in sh mount umount insmod mkdir cat echo ls sleep poweroff cmp sync hexdump ip udhcpc grep seq head timeout date; do
		ln -sf busybox "$r/bin/$t"
	done
	# nvme-cli, and GNU dd (the overwrite benchmark's baseline), with the
	# shared libraries they load, at their own paths.
	for bin in "$(command -v nvme)" "$(command -v dd)"; do
		mkdir -p "$r$(dirname "$bin")"
		cp "$bin" "$r$bin"
		for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
			mkdir -p "$r$(dirname "$lib")"
			cp -L "$lib" "$r$lib"
		done
	done
	# Modules, in load order (dependencies first; Debian's are uncompressed).
	: >"$r/lib/modules/order"
	for m in crct10dif_common crct10dif_generic crc-t10dif crc64 crc64_rocksoft_generic crc64-rocksoft t10-pi nvme-core nvme \
		vfio vfio_iommu_type1 vfio_virqfd irqbypass vfio-pci-core vfio-pci; do
		f=$(find "$kdir/kernel" -name "$m.ko" | head -1)
		[ -n "$f" ] || { echo "kernel-lane: module $m not in $kpkg" >&2; exit 1; }
		cp "$f" "$r/lib/modules/"
		echo "$m.ko" >>"$r/lib/modules/order"
	done
	# virtio-net for scourd's guest (QEMU user networking, guestfwd only).
	: >"$r/lib/modules/net.order"
	for m in failover net_failover virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_net; do
		f=$(find "$kdir/kernel" -name "$m.ko" | head -1)
		[ -n "$f" ] || { echo "kernel-lane: module $m not in $kpkg" >&2; exit 1; }
		cp "$f" "$r/lib/modules/"
		echo "$m.ko" >>"$r/lib/modules/net.order"
	done
	cp "$root/kernellane/init.sh" "$r/init"
	chmod 755 "$r/init"
	mkdir -p "$cache"
	(cd "$r" && find . | cpio -o -H newc --quiet) >"$cache/base.cpio.tmp"
	cp "$tmp"/k/boot/vmlinuz-* "$cache/vmlinuz"
	mv "$cache/base.cpio.tmp" "$cache/base.cpio"
	rm -rf "$tmp"
	trap - EXIT
fi

# --- scour's binaries and the guest tests ------------------------------------
mkdir -p "$out"
s=$(mktemp -d)
trap 'rm -rf "$s"' EXIT
mkdir -p "$s/scour/etc" "$s/tests" "$s/usr/libexec/scour/plugins"
cp "$root/deploy/scour.yaml" "$s/scour/etc/deploy-scour.yaml"
(cd "$root" && CGO_ENABLED=0 $GO build -trimpath -o "$s/scour/" ./cmd/...)
(cd "$root" && CGO_ENABLED=0 $GO test -c -tags kernelguest -o "$s/tests/guest.test" ./kernellane/guest)
# For the guest variant of make bench-overwrite (BenchmarkOverwriteVsDD).
(cd "$root" && CGO_ENABLED=0 $GO test -c -o "$s/tests/builtin.test" ./plugins/builtin)
(cd "$s" && find scour tests usr | cpio -o -H newc --quiet) >"$s/scour.cpio"
cp "$cache/vmlinuz" "$out/vmlinuz"
cat "$cache/base.cpio" "$s/scour.cpio" >"$out/initramfs.cpio"
echo "kernel-lane: $out/vmlinuz $out/initramfs.cpio ($(du -h "$out/initramfs.cpio" | cut -f1))"
