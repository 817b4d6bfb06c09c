#!/usr/bin/env bash
# Builds the e2e container images without a registry: debootstrap one Debian
# bookworm (minbase) root filesystem with the packages in e2e/images/packages,
# lay the recipe's config files over a hard-linked copy, and import it with
# podman twice: one image whose entry point is RabbitMQ, one whose entry point
# is Placement (PostgreSQL or sqlite, noauth2 or Keystone:
# e2e/images/placement-start). Glance's and Keystone's images come from root
# filesystems of their own (e2e/images/glance-packages,
# e2e/images/keystone-packages), so no list's change rebuilds another's.
# Tags are the recipe's content hash, so nothing is rebuilt unless the recipe
# changed. The debootstrap output is cached under e2e/.images/ (gitignored),
# keyed by the package list.
#
# Environment: SCOUR_E2E_RABBITMQ_IMAGE / SCOUR_E2E_PLACEMENT_IMAGE /
# SCOUR_E2E_GLANCE_IMAGE / SCOUR_E2E_KEYSTONE_IMAGE (names to
# use instead; when set and not localhost/scour-e2e-*, nothing is built),
# SCOUR_E2E_DEBIAN_MIRROR (defaults to this machine's apt mirror).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/e2e-lib.sh
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/e2e/containers.conf}"

start=$(date +%s)
hash=$(e2e_recipe_hash)
rabbit=$(e2e_rabbitmq_image)
placement=$(e2e_placement_image)
glance=$(e2e_glance_image)
keystone=$(e2e_keystone_image)

have_image() { podman image exists "$1"; }
have_all() { have_image "$rabbit" && have_image "$placement" && have_image "$glance" && have_image "$keystone"; }

if have_all; then
	echo "e2e-images: $rabbit, $placement, $glance and $keystone are up to date (recipe $hash)"
	exit 0
fi
for img in "$rabbit" "$placement" "$glance" "$keystone"; do
	case "$img" in
	localhost/scour-e2e-*) ;;
	*) have_image "$img" || { echo "e2e-images: $img is not a scour-built image and is not present; pull it first" >&2; exit 1; } ;;
	esac
done

if [ "$(id -u)" != 0 ]; then
	echo "e2e-images: debootstrap, chroot and rootful podman need root: run as root (or sudo make e2e-images)" >&2
	exit 1
fi
cache=e2e/.images
mkdir -p "$cache"
# One build at a time per working tree (make test may run in parallel).
exec 9>"$cache/.build.lock"
flock 9
if have_all; then
	echo "e2e-images: built meanwhile by another run (recipe $hash)"
	exit 0
fi
# rootfs PACKAGE_LIST: debootstrap bookworm (minbase) plus the list's
# packages into e2e/.images/rootfs-<key of the list>, once; sets $rootfs.
rootfs() {
	local pkgs mirror rootkey t0
	pkgs=$(grep -v '^[[:space:]]*#' "$1" | grep -v '^[[:space:]]*$' | paste -sd, -)
	mirror=$(e2e_debian_mirror)
	rootkey=$(printf '%s\n' bookworm minbase "$pkgs" | sha256sum | cut -c1-12)
	rootfs="$cache/rootfs-$rootkey"
	if [ -f "$rootfs/.scour-complete" ]; then
		echo "e2e-images: reusing $rootfs"
		return 0
	fi
	echo "e2e-images: debootstrap bookworm ($pkgs) from $mirror into $rootfs"
	rm -rf "$rootfs" "$rootfs.tmp"
	t0=$(date +%s)
	# debootstrap's own resolver cannot follow virtual packages (python3-bcrypt
	# needs python3-cffi-backend-api-min), so it lays down minbase only and apt
	# inside the chroot installs the recipe's packages. policy-rc.d keeps
	# package scripts from starting services.
	debootstrap --variant=minbase bookworm "$rootfs.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
		{ tail -30 "$cache/debootstrap.log" >&2; echo "e2e-images: debootstrap failed, full log in $cache/debootstrap.log" >&2; exit 1; }
	printf '#!/bin/sh\nexit 101\n' >"$rootfs.tmp/usr/sbin/policy-rc.d"
	chmod +x "$rootfs.tmp/usr/sbin/policy-rc.d"
	# shellcheck disable=SC2086
	chroot "$rootfs.tmp" /usr/bin/env DEBIAN_FRONTEND=noninteractive LC_ALL=C \
		sh -c "apt-get update && apt-get install -y --no-install-recommends ${pkgs//,/ }" >>"$cache/debootstrap.log" 2>&1 ||
		{ tail -30 "$cache/debootstrap.log" >&2; echo "e2e-images: apt-get install in the chroot failed, full log in $cache/debootstrap.log" >&2; exit 1; }
	rm -f "$rootfs.tmp/usr/sbin/policy-rc.d"
	# debootstrap mounts proc in the target and leaves it mounted when its
	# umount finds it busy (a process reading the tree): the image copies
	# below (cp -al) would then fail on it. Nothing may stay mounted here.
	{ findmnt -rn -o TARGET | grep -F "$rootfs.tmp/" || true; } | sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m"
	done
	if findmnt -rn -o TARGET | grep -qF "$rootfs.tmp/"; then
		echo "e2e-images: $rootfs.tmp still has mounts inside (findmnt shows them); unmount them and run again" >&2
		exit 1
	fi
	# Trim what a container never reads.
	rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/* \
		"$rootfs.tmp"/usr/share/doc/* "$rootfs.tmp"/usr/share/man/* "$rootfs.tmp"/usr/share/locale/*
	# PostgreSQL's JIT (LLVM, z3 and the bitcode: 160 MB, a third of the
	# image) is off in e2e/images/postgresql.conf.
	rm -rf "$rootfs.tmp"/usr/lib/postgresql/*/lib/bitcode "$rootfs.tmp"/usr/lib/postgresql/*/lib/llvmjit* \
		"$rootfs.tmp"/usr/lib/x86_64-linux-gnu/libLLVM-* "$rootfs.tmp"/usr/lib/x86_64-linux-gnu/libz3.so*
	touch "$rootfs.tmp/.scour-complete"
	mv "$rootfs.tmp" "$rootfs"
	echo "e2e-images: debootstrap took $(($(date +%s) - t0))s"
}

# Config goes on a hard-linked copy: files are replaced (rm, then copy), never
# written through, so the cached root filesystem stays pristine.
put() { # put SRC DEST MODE
	mkdir -p "$(dirname "$stage$2")"
	rm -f "$stage$2"
	install -m "$3" "$1" "$stage$2"
}
path='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
t0=$(date +%s)

# Glance: Debian's glance-api (eventlet), sqlite, the file store, the
# unauthenticated pipeline (no paste flavor); e2e/images/glance-start syncs
# the database at container start.
build_glance() {
	rootfs e2e/images/glance-packages
	stage="$cache/stage-glance-$hash"
	rm -rf "$stage"
	cp -al "$rootfs" "$stage"
	put e2e/images/glance-api.conf /etc/glance/glance-api.conf 0644
	put e2e/images/glance-start /usr/local/bin/glance-start 0755
	mkdir -p "$stage/var/lib/glance/images" "$stage/etc/glance/policy.e2e.d"
	rm -f "$stage/.scour-complete"
	tar -C "$stage" -c . | podman import -q \
		--change "$path" \
		--change 'EXPOSE 9292' \
		--change "LABEL org.scour.e2e.recipe=$hash" \
		--change 'CMD ["/usr/local/bin/glance-start"]' \
		- "$glance" >/dev/null
	rm -rf "$stage"
}
have_image "$glance" || build_glance

# Keystone: python3-keystone (not the keystone package, whose maintainer
# scripts configure a database through debconf) served by uwsgi, sqlite and
# fernet tokens; e2e/images/keystone-start bootstraps it at container start.
build_keystone() {
	rootfs e2e/images/keystone-packages
	stage="$cache/stage-keystone-$hash"
	rm -rf "$stage"
	cp -al "$rootfs" "$stage"
	put e2e/images/keystone.conf /etc/keystone/keystone.conf 0644
	put e2e/images/keystone-start /usr/local/bin/keystone-start 0755
	mkdir -p "$stage/var/lib/keystone" "$stage/etc/keystone/fernet-keys" "$stage/etc/keystone/credential-keys"
	# Bootstrapped here, once, not at each container start: five Python
	# processes took 10 s on an idle machine and over 2 minutes on a
	# loaded one. keystone-start puts the container's own URL in the
	# catalog and its token lifetime in keystone.conf.
	chroot "$stage" /usr/bin/env LC_ALL=C sh -ec '
		keystone-manage db_sync
		python3 -c "import sqlite3; sqlite3.connect(\"/var/lib/keystone/keystone.db\").execute(\"PRAGMA journal_mode=WAL\")"
		keystone-manage fernet_setup --keystone-user root --keystone-group root
		keystone-manage credential_setup --keystone-user root --keystone-group root
		keystone-manage bootstrap --bootstrap-password admin --bootstrap-region-id RegionOne \
			--bootstrap-admin-url http://keystone.invalid/v3 --bootstrap-internal-url http://keystone.invalid/v3 \
			--bootstrap-public-url http://keystone.invalid/v3' >"$cache/keystone-bootstrap.log" 2>&1 ||
		{ tail -30 "$cache/keystone-bootstrap.log" >&2; echo "e2e-images: bootstrapping Keystone failed, full log in $cache/keystone-bootstrap.log" >&2; exit 1; }
	rm -f "$stage/.scour-complete"
	tar -C "$stage" -c . | podman import -q \
		--change "$path" \
		--change 'EXPOSE 5000' \
		--change "LABEL org.scour.e2e.recipe=$hash" \
		--change 'CMD ["/usr/local/bin/keystone-start"]' \
		- "$keystone" >/dev/null
	rm -rf "$stage"
}
have_image "$keystone" || build_keystone

if have_image "$rabbit" && have_image "$placement"; then
	echo "e2e-images: built $glance and $keystone in $(($(date +%s) - start))s"
	exit 0
fi
rootfs e2e/images/packages
stage="$cache/stage-$hash"
rm -rf "$stage"
cp -al "$rootfs" "$stage"
put e2e/images/placement.conf /etc/placement/placement.conf 0644
put e2e/images/placement-start /usr/local/bin/placement-start 0755
put e2e/images/rabbitmq.conf /etc/rabbitmq/rabbitmq.conf 0644
# The cluster the postgresql package created (Debian's layout:
# /etc/postgresql/<version>/main, conf.d read last).
pgconf=$(cd "$stage" && ls -d etc/postgresql/*/main/conf.d 2>/dev/null | head -1)
[ -n "$pgconf" ] || { echo "e2e-images: no PostgreSQL cluster in $rootfs (is postgresql in e2e/images/packages?)" >&2; exit 1; }
put e2e/images/postgresql.conf "/$pgconf/scour-e2e.conf" 0644
mkdir -p "$stage/etc/placement/policy.d" "$stage/var/lib/placement"
rm -f "$stage/.scour-complete"

if ! have_image "$rabbit"; then
	tar -C "$stage" -c . | podman import -q \
		--change "$path" \
		--change 'ENV RABBITMQ_LOGS=-' \
		--change 'ENV RABBITMQ_NODENAME=rabbit@localhost' \
		--change 'ENV HOME=/var/lib/rabbitmq' \
		--change 'USER rabbitmq' \
		--change 'EXPOSE 5672' \
		--change "LABEL org.scour.e2e.recipe=$hash" \
		--change 'CMD ["/usr/lib/rabbitmq/bin/rabbitmq-server"]' \
		- "$rabbit" >/dev/null
fi
if ! have_image "$placement"; then
	tar -C "$stage" -c . | podman import -q \
		--change "$path" \
		--change 'ENV OS_PLACEMENT_CONFIG_DIR=/etc/placement' \
		--change 'EXPOSE 8778' \
		--change "LABEL org.scour.e2e.recipe=$hash" \
		--change 'CMD ["/usr/local/bin/placement-start"]' \
		- "$placement" >/dev/null
fi
rm -rf "$stage"
# Images of older recipes only take disk space, but other checkouts on this
# machine (worktrees, branches) may run a recipe of their own: remove only
# those built more than a day ago, so two checkouts do not remove each other's.
podman images --filter until=24h --format '{{.Repository}}:{{.Tag}}' 2>/dev/null |
	grep -E '^localhost/scour-e2e-(rabbitmq|placement|glance|keystone):' | grep -v ":$hash\$" |
	xargs -r podman rmi >/dev/null 2>&1 || true
podman image prune -f --filter label=org.scour.e2e.recipe >/dev/null 2>&1 || true
echo "e2e-images: podman import took $(($(date +%s) - t0))s"
echo "e2e-images: built $rabbit, $placement, $glance and $keystone in $(($(date +%s) - start))s"
