#!/usr/bin/env bash
# Installs, from Debian, the tools `make test` runs against the deploy
# files when they are missing: promtool (package prometheus) for the alert
# rules, systemd-analyze (package systemd) for the unit's security score,
# sqlite3 for the documented backup of the records, gcc for the stand-in
# NVIDIA driver libraries the GPU scrubber tests build.
# Usage: scripts/ensure-debian-tools.sh TOOL...
set -euo pipefail

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

declare -A pkg=([promtool]=prometheus [systemd-analyze]=systemd [sqlite3]=sqlite3 [gcc]=gcc)
missing=()
for tool in "$@"; do
	[ -n "${pkg[$tool]:-}" ] || { echo "ensure-debian-tools: unknown tool $tool" >&2; exit 2; }
	command -v "$tool" >/dev/null || missing+=("${pkg[$tool]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "ensure-debian-tools: installing ${missing[*]}"
sudo_ apt-get update -qq
# The prometheus package ships a server too: it must not start here.
sudo_ env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
