#!/usr/bin/env bash
# Builds the scour container image without a registry (make image / make
# image-save; docs/operations.md). The Dockerfile stays the registry path;
# this script produces the same layout from Debian's apt mirror alone:
#
#   1. debootstrap a Debian bookworm minbase root filesystem and apt-get
#      install the packages the Dockerfile installs (ca-certificates iproute2
#      nvme-cli pciutils), cached under .cache/image/ keyed by a hash of that list, so
#      a rerun only re-imports (seconds);
#   2. lay $BIN/scourd, $BIN/scourctl (static, built by make),
#      $BIN/scour-gpu-scrub (dynamic: it loads libcuda) and
#      deploy/scour.yaml over a hard-linked copy of it;
#   3. podman import it with the Dockerfile's metadata, as
#      localhost/scour:$VERSION and localhost/scour:latest;
#   4. verify the image by running it (fails loudly).
#
# Usage: image.sh [build|verify|save]     (default build, which verifies)
#   save: podman save -o $BIN/scour-image.tar (both tags), for hosts without
#         a registry: podman load -i / docker load -i.
# Environment: VERSION, BIN (from the Makefile), SCOUR_IMAGE (default
# localhost/scour), SCOUR_IMAGE_KEEP=1 (keep images of earlier versions),
# SCOUR_IMAGE_DEBIAN_MIRROR / SCOUR_IMAGE_SECURITY_MIRROR
# (default: this machine's apt mirrors), CONTAINERS_CONF (default
# e2e/containers.conf, as the e2e images use).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/e2e-lib.sh
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/e2e/containers.conf}"

what="${1:-build}"
BIN="${BIN:-bin}"
VERSION="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
repo="${SCOUR_IMAGE:-localhost/scour}"
image="$repo:$VERSION"
latest="$repo:latest"
# The packages the Dockerfile's runtime stage installs: keep the two in step.
packages=(ca-certificates iproute2 nvme-cli pciutils)
# Bump when the root filesystem recipe below changes (not the package list:
# that is hashed already), so a stale cache is not reused.
recipe=1
builder=scripts/image.sh

say() { echo "image: $*"; }
die() { echo "image: $*" >&2; exit 1; }

mirror() {
	if [ -n "${SCOUR_IMAGE_DEBIAN_MIRROR:-}" ]; then echo "$SCOUR_IMAGE_DEBIAN_MIRROR"; return; fi
	SCOUR_E2E_DEBIAN_MIRROR="" e2e_debian_mirror
}
security_mirror() {
	if [ -n "${SCOUR_IMAGE_SECURITY_MIRROR:-}" ]; then echo "$SCOUR_IMAGE_SECURITY_MIRROR"; return; fi
	local m
	m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
		grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]*/debian-security/?( |$)' | head -1 | tr -d ' ')
	echo "${m:-http://deb.debian.org/debian-security}"
}
# apt sources in deb822 form, as debian:bookworm-slim ships them.
sources() { # sources MIRROR SECURITY_MIRROR
	cat <<EOF
Types: deb
URIs: $1
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $2
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
}

# rootfs prints the path of the cached root filesystem, building it first
# when missing (debootstrap minbase, then apt-get inside the chroot like the
# e2e images: debootstrap's own resolver does not follow virtual packages).
rootfs() {
	local cache=.cache/image key root log t0 m sm
	key=$(printf '%s\n' bookworm minbase "recipe=$recipe" "${packages[@]}" | sha256sum | cut -c1-12)
	root="$cache/rootfs-$key"
	log="$cache/debootstrap-$key.log"
	if [ -f "$root/.scour-complete" ]; then
		say "reusing root filesystem $root" >&2
		echo "$root"
		return
	fi
	m=$(mirror)
	sm=$(security_mirror)
	say "debootstrap bookworm minbase + ${packages[*]} from $m (+ $sm) into $root (log $log)" >&2
	t0=$SECONDS
	rm -rf "$root" "$root.tmp"
	debootstrap --variant=minbase bookworm "$root.tmp" "$m" >"$log" 2>&1 ||
		{ tail -30 "$log" >&2; die "debootstrap failed, full log in $log"; }
	# The image's apt sources: bookworm, bookworm-updates and
	# bookworm-security, as the Dockerfile's base image has them; the build
	# uses this machine's mirrors, the image names deb.debian.org.
	rm -f "$root.tmp/etc/apt/sources.list"
	sources "${m%/}" "${sm%/}" >"$root.tmp/etc/apt/sources.list.d/debian.sources"
	printf '#!/bin/sh\nexit 101\n' >"$root.tmp/usr/sbin/policy-rc.d"
	chmod +x "$root.tmp/usr/sbin/policy-rc.d"
	chroot "$root.tmp" /usr/bin/env DEBIAN_FRONTEND=noninteractive LC_ALL=C \
		sh -c "apt-get update && apt-get install -y --no-install-recommends ${packages[*]} && apt-get clean" >>"$log" 2>&1 ||
		{ tail -30 "$log" >&2; die "apt-get install in the chroot failed, full log in $log"; }
	rm -f "$root.tmp/usr/sbin/policy-rc.d"
	sources http://deb.debian.org/debian http://deb.debian.org/debian-security >"$root.tmp/etc/apt/sources.list.d/debian.sources"
	# Trim what a container never reads (as debian:*-slim does): apt lists and
	# caches, documentation except the copyright files, man pages, locales,
	# logs; and this build machine's name and resolver (the container engine
	# provides its own).
	(
		cd "$root.tmp"
		rm -rf var/cache/apt/archives/*.deb var/cache/apt/*.bin var/lib/apt/lists/* \
			usr/share/man/* usr/share/info/* usr/share/locale/* usr/share/lintian \
			var/cache/debconf/*-old var/lib/dpkg/*-old var/log/apt/* var/log/dpkg.log \
			var/log/alternatives.log var/log/bootstrap.log
		find usr/share/doc -mindepth 1 -not -type d -not -name copyright -delete
		find usr/share/doc -mindepth 1 -type d -empty -delete
		: >etc/hostname
		: >etc/resolv.conf
	)
	touch "$root.tmp/.scour-complete"
	mv "$root.tmp" "$root"
	say "root filesystem built in $((SECONDS - t0))s" >&2
	echo "$root"
}

binaries() {
	local b
	for b in scourd scourctl; do
		[ -x "$BIN/$b" ] || die "$BIN/$b is missing: run make image (it builds it), or make build"
		# The image has no Go toolchain or libc guarantees: static only.
		if ldd "$BIN/$b" >/dev/null 2>&1; then
			die "$BIN/$b is dynamically linked: build it with CGO_ENABLED=0 (make image does)"
		fi
	done
	# The GPU scrubber loads the node's libcuda: it is dynamic on purpose.
	[ -x "$BIN/scour-gpu-scrub" ] || die "$BIN/scour-gpu-scrub is missing: run make image (it builds it), or make build"
	local v
	v=$("$BIN/scourd" --version)
	[ "$v" = "scourd $VERSION" ] || die "$BIN/scourd reports \"$v\", not version $VERSION: rebuild it (make image)"
}

build() {
	[ "$(id -u)" = 0 ] || die "debootstrap, chroot and rootful podman need root: run as root (or sudo make image)"
	command -v podman >/dev/null && command -v debootstrap >/dev/null ||
		die "podman and debootstrap are needed: bash scripts/e2e-env.sh packages installs them"
	local start=$SECONDS root stage t0
	binaries
	mkdir -p .cache/image
	# One build at a time per working tree.
	exec 9>.cache/image/.build.lock
	flock 9
	root=$(rootfs)

	# Files are added to a hard-linked copy (new files only, never written
	# through), so the cached root filesystem stays pristine.
	stage=".cache/image/stage-$$"
	rm -rf "$stage"
	trap 'rm -rf "$stage"' EXIT
	cp -al "$root" "$stage"
	rm -f "$stage/.scour-complete"
	install -o 0 -g 0 -m 0755 "$BIN/scourd" "$BIN/scourctl" "$BIN/scour-gpu-scrub" "$stage/usr/local/bin/"
	install -o 0 -g 0 -m 0755 -d "$stage/etc/scour"
	install -o 0 -g 0 -m 0644 deploy/scour.yaml "$stage/etc/scour/scour.yaml"

	t0=$SECONDS
	# The Dockerfile's metadata, instruction for instruction.
	tar -C "$stage" --numeric-owner -c . | podman import -q \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'EXPOSE 9464' \
		--change 'STOPSIGNAL SIGTERM' \
		--change 'ENTRYPOINT ["/usr/local/bin/scourd"]' \
		--change 'CMD ["--config", "/etc/scour/scour.yaml"]' \
		--change "LABEL org.opencontainers.image.title=scour" \
		--change "LABEL org.opencontainers.image.version=$VERSION" \
		--change "LABEL org.scour.image.builder=$builder" \
		- "$image" >/dev/null
	podman tag "$image" "$latest"
	rm -rf "$stage"
	trap - EXIT
	# Images of earlier versions built here (each a full 130 MB layer) and a
	# rebuild's untagged predecessor only take disk space; SCOUR_IMAGE_KEEP=1
	# keeps the earlier versions.
	if [ "${SCOUR_IMAGE_KEEP:-}" != 1 ]; then
		podman images --filter "label=org.scour.image.builder=$builder" --format '{{.Repository}}:{{.Tag}}' |
			grep -F "$repo:" | grep -vxF -e "$image" -e "$latest" | xargs -r podman rmi >/dev/null 2>&1 || true
	fi
	podman image prune -f --filter "label=org.scour.image.builder=$builder" >/dev/null 2>&1 || true
	say "podman import took $((SECONDS - t0))s"
	verify
	say "built $image and $latest in $((SECONDS - start))s"
}

# check NAME EXPECTED-SUBSTRING COMMAND...: run, show the output, fail loudly.
check() {
	local name=$1 want=$2 out rc=0
	shift 2
	out=$("$@" 2>&1) || rc=$?
	if [ $rc -ne 0 ] || ! grep -qF -- "$want" <<<"$out"; then
		echo "image: CHECK FAILED: $name (exit $rc, wanted output containing \"$want\")" >&2
		echo "  \$ $*" >&2
		sed 's/^/  | /' <<<"$out" >&2
		exit 1
	fi
	say "ok: $name: $(head -1 <<<"$out")"
}

verify() {
	podman image exists "$latest" || die "$latest does not exist: run make image"
	local run=(podman run --rm --network none)
	check "scourd --version" "scourd $VERSION" "${run[@]}" "$latest" --version
	check "scourctl version" "$VERSION" "${run[@]}" --entrypoint /usr/local/bin/scourctl "$latest" version
	# The baked /etc/scour/scour.yaml (scourd's default --config; arguments
	# replace CMD), validated by scourd: SCOUR_HOST is not needed, host
	# defaults to the short hostname. Cleaning needs Placement credentials,
	# checked offline: an openrc's variables (never contacted here).
	check "scourd --check-config (baked /etc/scour/scour.yaml)" "# configuration is valid" \
		"${run[@]}" -e OS_AUTH_URL=https://keystone.invalid/v3 -e OS_USERNAME=scour -e OS_PASSWORD=x \
		-e OS_PROJECT_NAME=service "$latest" --check-config
	check "nvme-cli" "nvme version" "${run[@]}" --entrypoint nvme "$latest" version
	check "iproute2 (devlink)" "devlink utility" "${run[@]}" --entrypoint devlink "$latest" -V
	check "pciutils" "lspci version" "${run[@]}" --entrypoint lspci "$latest" --version
	check "ca-certificates" "/etc/ssl/certs/ca-certificates.crt" \
		"${run[@]}" --entrypoint ls "$latest" /etc/ssl/certs/ca-certificates.crt
	check "image metadata" \
		'["/usr/local/bin/scourd"] ["--config","/etc/scour/scour.yaml"] map[9464/tcp:{}]' \
		podman image inspect --format '{{json .Config.Entrypoint}} {{json .Config.Cmd}} {{.Config.ExposedPorts}}' "$latest"
	# podman import stores STOPSIGNAL SIGTERM as its number.
	local sig
	sig=$(podman image inspect --format '{{.Config.StopSignal}}' "$latest")
	case "$sig" in
	15 | SIGTERM) say "ok: stop signal: $sig (SIGTERM)" ;;
	*) die "CHECK FAILED: stop signal is \"$sig\", not SIGTERM" ;;
	esac
	check "PATH" "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$latest"
	check "same image under both tags" "$(podman image inspect --format '{{.Id}}' "$latest")" \
		podman image inspect --format '{{.Id}}' "$image"
}

save() {
	podman image exists "$image" || die "$image does not exist: run make image"
	local out="$BIN/scour-image.tar"
	mkdir -p "$BIN"
	rm -f "$out"
	podman save -q --format docker-archive -o "$out" "$image" "$latest"
	say "saved $image and $latest to $out ($(du -h "$out" | cut -f1)); load it with: podman load -i $out (or docker load -i)"
}

case "$what" in
build) build ;;
verify) verify ;;
save) save ;;
*) echo "usage: $0 [build|verify|save]" >&2; exit 2 ;;
esac
