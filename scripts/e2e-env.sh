#!/usr/bin/env bash
# Prepares everything the e2e tests need, doing only what is missing:
#   1. podman, runc and debootstrap (apt-get, on a fresh machine),
#   2. podman's Docker-compatible API socket, configured by e2e/containers.conf,
#   3. the RabbitMQ and Placement images (scripts/e2e-images.sh).
# Usage: e2e-env.sh [packages|socket|images|all]   (default all)
# Environment: SCOUR_E2E_PODMAN_SOCKET (default /run/podman/podman.sock);
# SCOUR_E2E_AMQP_URL and SCOUR_E2E_PLACEMENT_URL both set skip everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/e2e/containers.conf}"
sock="${SCOUR_E2E_PODMAN_SOCKET:-/run/podman/podman.sock}"
what="${1:-all}"

if [ -n "${SCOUR_E2E_AMQP_URL:-}" ] && [ -n "${SCOUR_E2E_PLACEMENT_URL:-}" ]; then
	echo "e2e-env: SCOUR_E2E_AMQP_URL and SCOUR_E2E_PLACEMENT_URL are set: using those, no containers"
	exit 0
fi

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

packages() {
	local missing=()
	command -v podman >/dev/null || missing+=(podman)
	command -v runc >/dev/null || [ -x /usr/sbin/runc ] || missing+=(runc)
	command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
	command -v curl >/dev/null || missing+=(curl)
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "e2e-env: installing ${missing[*]}"
	local t0=$SECONDS
	sudo_ apt-get update -qq
	sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	echo "e2e-env: installed in $((SECONDS - t0))s"
}

answers() { curl -fsS --max-time 3 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }

socket() {
	if answers; then
		echo "e2e-env: podman socket $sock answers"
		return 0
	fi
	mkdir -p "$(dirname "$sock")" e2e/.images
	echo "e2e-env: starting podman system service on $sock (log e2e/.images/podman-service.log)"
	rm -f "$sock"
	setsid nohup podman system service --time=0 "unix://$sock" >e2e/.images/podman-service.log 2>&1 </dev/null &
	for _ in $(seq 1 50); do answers && { echo "e2e-env: podman socket ready"; return 0; }; sleep 0.2; done
	echo "e2e-env: podman socket $sock did not answer; see e2e/.images/podman-service.log" >&2
	tail -20 e2e/.images/podman-service.log >&2 || true
	return 1
}

# Remove e2e containers whose test binary is gone (killed by a timeout or
# ^C before harness.Main could remove them); running suites keep theirs.
reap() {
	answers || return 0
	podman ps -a --filter label=org.scour.e2e --format '{{.ID}} {{index .Labels "org.scour.e2e.pid"}}' 2>/dev/null |
		while read -r id pid; do
			if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
				podman rm -f "$id" >/dev/null 2>&1 && echo "e2e-env: removed stale container $id (owner pid ${pid:-?} gone)"
			fi
		done
	return 0
}

case "$what" in
packages) packages ;;
socket) packages; socket; reap ;;
images) packages; bash scripts/e2e-images.sh ;;
all) packages; socket; reap; bash scripts/e2e-images.sh ;;
*) echo "usage: $0 [packages|socket|images|all]" >&2; exit 2 ;;
esac
