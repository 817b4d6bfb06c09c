#!/usr/bin/env bash
# Runs the bus and scourctl integration tests against RabbitMQ 4: Debian
# trixie's rabbitmq-server (4.0.5), debootstrapped (minbase) and imported
# with podman the way scripts/e2e-images.sh builds the bookworm e2e images
# (same rabbitmq.conf, mirror and containers.conf), run on a free loopback
# port next to the local 3.x broker the other tests use. The image is
# tagged by its recipe's hash (this script and e2e/images/rabbitmq.conf):
# it is built once (about a minute), then only a container starts.
#
# Usage: rabbitmq4.sh [image|test|e2e]   (default test; e2e runs the whole
# e2e suite with this broker as its RabbitMQ container, a few minutes)
# Environment: SCOUR_RABBITMQ4_PACKAGES (Go packages to test, default
# "./bus/... ./cmd/scourctl/..."), SCOUR_E2E_DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/e2e-lib.sh
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/e2e/containers.conf}"
what="${1:-test}"
suite=trixie

hash=$(cat scripts/rabbitmq4.sh e2e/images/rabbitmq.conf | sha256sum | cut -c1-12)
image="localhost/scour-rabbitmq4:$hash"

build() {
	if podman image exists "$image"; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "rabbitmq4: debootstrap and rootful podman need root: run as root" >&2
		exit 1
	fi
	bash scripts/e2e-env.sh packages
	local cache=e2e/.images rootfs t0=$SECONDS
	mkdir -p "$cache"
	exec 8>"$cache/.rabbitmq4.lock"
	flock 8
	podman image exists "$image" && return 0
	rootfs="$cache/rootfs-$suite-rabbitmq-$hash"
	if [ ! -f "$rootfs/.scour-complete" ]; then
		rm -rf "$rootfs" "$rootfs.tmp"
		echo "rabbitmq4: debootstrap $suite rabbitmq-server from $(e2e_debian_mirror)"
		debootstrap --variant=minbase --include=rabbitmq-server "$suite" "$rootfs.tmp" "$(e2e_debian_mirror)" \
			>"$cache/debootstrap-rabbitmq4.log" 2>&1 ||
			{ tail -30 "$cache/debootstrap-rabbitmq4.log" >&2; echo "rabbitmq4: debootstrap failed, full log in $cache/debootstrap-rabbitmq4.log" >&2; exit 1; }
		rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/* \
			"$rootfs.tmp"/usr/share/doc/* "$rootfs.tmp"/usr/share/man/* "$rootfs.tmp"/usr/share/locale/*
		install -D -m 0644 e2e/images/rabbitmq.conf "$rootfs.tmp/etc/rabbitmq/rabbitmq.conf"
		touch "$rootfs.tmp/.scour-complete"
		mv "$rootfs.tmp" "$rootfs"
	fi
	tar -C "$rootfs" --exclude=./.scour-complete -c . | podman import -q \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV RABBITMQ_LOGS=-' \
		--change 'ENV RABBITMQ_NODENAME=rabbit@localhost' \
		--change 'ENV HOME=/var/lib/rabbitmq' \
		--change 'USER rabbitmq' \
		--change 'EXPOSE 5672' \
		--change "LABEL org.scour.rabbitmq4.recipe=$hash" \
		--change 'CMD ["/usr/lib/rabbitmq/bin/rabbitmq-server"]' \
		- "$image" >/dev/null
	rm -rf "$rootfs"
	# Older recipes' images only take disk space.
	podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/scour-rabbitmq4:' | grep -v ":$hash\$" |
		xargs -r podman rmi >/dev/null 2>&1 || true
	echo "rabbitmq4: built $image in $((SECONDS - t0))s"
}

build
[ "$what" = image ] && exit 0
if [ "$what" = e2e ]; then
	# An external broker (SCOUR_E2E_AMQP_URL) would take the place of the
	# image: this run is for RabbitMQ 4 only.
	unset SCOUR_E2E_AMQP_URL
	SCOUR_E2E_RABBITMQ_IMAGE="$image" ${GO:-go} test -count=1 -timeout 30m ./e2e/
	exit
fi

name="scour-rabbitmq4-$$"
podman run -d --rm --name "$name" -p 127.0.0.1::5672 "$image" >/dev/null
trap 'podman stop -t 5 "$name" >/dev/null 2>&1 || true' EXIT
port=$(podman port "$name" 5672/tcp | head -1 | sed 's/.*://')
# rabbitmqctl fails at once until the node's distribution listener is up,
# then await_startup waits out the rest of the boot.
for i in $(seq 60); do
	podman exec "$name" rabbitmqctl await_startup --timeout 60 >/dev/null 2>&1 && break
	if [ "$i" = 60 ]; then
		podman logs "$name" 2>&1 | tail -30 >&2
		echo "rabbitmq4: the broker did not start within 60s" >&2
		exit 1
	fi
	sleep 1
done
version=$(podman exec "$name" rabbitmqctl version)
echo "rabbitmq4: RabbitMQ $version on 127.0.0.1:$port"
case "$version" in
4.*) ;;
*) echo "rabbitmq4: $suite's rabbitmq-server is $version, not 4.x" >&2; exit 1 ;;
esac
# shellcheck disable=SC2086
SCOUR_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/" ${GO:-go} test -count=1 ${SCOUR_RABBITMQ4_PACKAGES:-./bus/... ./cmd/scourctl/...}
