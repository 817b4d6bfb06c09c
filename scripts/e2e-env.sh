#!/usr/bin/env bash
# Prepares everything the e2e tests need, doing only what is missing:
#   1. podman, runc and debootstrap (apt-get, on a fresh machine),
#   2. podman's Docker-compatible API socket, configured by e2e/containers.conf,
#   3. the RabbitMQ, Placement and Glance images (scripts/e2e-images.sh).
# Usage: e2e-env.sh [packages|socket|images|all]   (default all)
# Environment: SCOUR_E2E_PODMAN_SOCKET (default /run/podman/podman.sock);
# SCOUR_E2E_AMQP_URL and SCOUR_E2E_PLACEMENT_URL both set skip everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/e2e/containers.conf}"
sock="${SCOUR_E2E_PODMAN_SOCKET:-/run/podman/podman.sock}"
# The podman service outlives this checkout (CI clones, deleted worktrees):
# it runs from / with a copy of e2e/containers.conf and its log here.
state="${SCOUR_E2E_STATE_DIR:-/run/scour-e2e}"
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

# ours prints the pid of the podman service this script starts, if one runs.
ours() { pgrep -f "^podman system service --time=0 unix://$sock\$" | head -1 || true; }

# stale: the service runs from a directory (a checkout that may be gone:
# its containers then fail with "write child: broken pipe") or with another
# configuration than this checkout's e2e/containers.conf.
stale() {
	local pid=$1
	[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = / ] || return 0
	tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "CONTAINERS_CONF=$state/containers.conf" || return 0
	cmp -s e2e/containers.conf "$state/containers.conf" || return 0
	return 1
}

socket() {
	local pid
	pid=$(ours)
	if [ -n "$pid" ] && stale "$pid"; then
		echo "e2e-env: restarting podman service $pid (started from elsewhere or with another e2e/containers.conf)"
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
	fi
	if answers; then
		echo "e2e-env: podman socket $sock answers"
		return 0
	fi
	mkdir -p "$(dirname "$sock")" "$state"
	cp e2e/containers.conf "$state/containers.conf"
	echo "e2e-env: starting podman system service on $sock (log $state/podman-service.log)"
	rm -f "$sock"
	# The service outlives this script: it must not keep the caller's file
	# descriptors (a `flock <file> make test` lock held by the service and
	# its containers would never be released).
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] && eval "exec $fd>&-"
		done
		cd / && CONTAINERS_CONF="$state/containers.conf" setsid nohup podman system service --time=0 "unix://$sock" \
			>"$state/podman-service.log" 2>&1 </dev/null &
	)
	for _ in $(seq 1 50); do answers && { echo "e2e-env: podman socket ready"; return 0; }; sleep 0.2; done
	echo "e2e-env: podman socket $sock did not answer; see $state/podman-service.log" >&2
	tail -20 "$state/podman-service.log" >&2 || true
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
	# Networks of broker clusters (harness.StartRabbitMQCluster), once
	# their containers are gone.
	for net in $(podman network ls -q --filter label=org.scour.e2e 2>/dev/null); do
		pid=$(podman network inspect --format '{{index .Labels "org.scour.e2e.pid"}}' "$net" 2>/dev/null)
		if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
			podman network rm "$net" >/dev/null 2>&1 && echo "e2e-env: removed stale network $net (owner pid ${pid:-?} gone)"
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
