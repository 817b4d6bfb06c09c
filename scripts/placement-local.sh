#!/usr/bin/env bash
# Runs a real OpenStack Placement (Debian's placement-api) on 127.0.0.1 for
# development and the placement/ integration tests: sqlite database, noauth2
# (send "X-Auth-Token: admin"), state in a throw-away directory.
#
#   scripts/placement-local.sh start   # install if needed, sync db, serve
#   scripts/placement-local.sh stop
#   scripts/placement-local.sh env     # prints the export line for the tests
#
# Environment: SCOUR_PLACEMENT_PORT (default 18778), SCOUR_PLACEMENT_STATE
# (default /dev/shm/scour-placement-$PORT, or under /tmp without /dev/shm). The standard trait
# HW_PCI_ONE_TIME_USE is missing from Debian's os-traits 2.9.0, so it is
# inserted into the traits table after `db sync` and before the server starts
# (Placement only adds missing standard traits at start and never removes rows).
# placement-manage needs --config-file: only the WSGI app reads
# OS_PLACEMENT_CONFIG_DIR. --http11-socket (not --http-socket): the latter
# answers HTTP/1.1 and then closes the connection, so clients that reuse
# connections get "connection reset by peer".
set -euo pipefail

PORT=${SCOUR_PLACEMENT_PORT:-18778}
# tmpfs when there is one: sqlite's fsyncs dominate write latency on disk.
STATE_ROOT=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && STATE_ROOT=/dev/shm
STATE=${SCOUR_PLACEMENT_STATE:-$STATE_ROOT/scour-placement-$PORT}
EXTRA_TRAITS=${SCOUR_PLACEMENT_EXTRA_TRAITS:-HW_PCI_ONE_TIME_USE}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

install() {
	if command -v placement-manage >/dev/null && command -v uwsgi >/dev/null &&
		[ -e /usr/bin/placement-api ]; then
		return 0
	fi
	echo "placement-local: installing placement-api (about 100 s)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update >/dev/null
	apt-get install -y --no-install-recommends placement-api python3-placement \
		uwsgi-plugin-python3 >/dev/null
}

configure() {
	mkdir -p "$STATE/policy.d"
	# policy_dirs must name an existing, empty directory: an empty value
	# makes oslo.policy parse placement.conf itself as a policy file.
	cat >"$STATE/placement.conf" <<CONF
[DEFAULT]
debug = false
[api]
auth_strategy = noauth2
[placement_database]
connection = sqlite:///$STATE/placement.sqlite
[oslo_policy]
policy_dirs = $STATE/policy.d
CONF
	export OS_PLACEMENT_CONFIG_DIR=$STATE
	placement-manage --config-file "$STATE/placement.conf" db sync
	# Insert the standard traits Debian's os-traits lacks. Columns are
	# checked rather than assumed, so a schema change fails loudly here.
	python3 - "$STATE/placement.sqlite" $EXTRA_TRAITS <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
cols = [r[1] for r in db.execute("PRAGMA table_info(traits)")]
if "name" not in cols:
    sys.exit("placement-local: traits table has no name column: %r" % cols)
for name in sys.argv[2:]:
    if db.execute("SELECT 1 FROM traits WHERE name = ?", (name,)).fetchone():
        continue
    if "created_at" in cols:
        db.execute("INSERT INTO traits (name, created_at) VALUES (?, datetime('now'))", (name,))
    else:
        db.execute("INSERT INTO traits (name) VALUES (?)", (name,))
db.commit()
PY
}

start() {
	if port_open "$PORT"; then
		echo "placement-local: 127.0.0.1:$PORT already open; not starting another" >&2
		env_line
		return 0
	fi
	install
	rm -rf "$STATE"
	configure
	OS_PLACEMENT_CONFIG_DIR=$STATE uwsgi --plugins python3 \
		--http11-socket "127.0.0.1:$PORT" --wsgi-file /usr/bin/placement-api \
		--master --processes 1 --threads 4 --enable-threads --die-on-term \
		--need-app --lazy-apps --pidfile "$STATE/uwsgi.pid" \
		--daemonize "$STATE/uwsgi.log"
	for _ in $(seq 1 60); do
		if port_open "$PORT"; then
			env_line
			return 0
		fi
		sleep 0.5
	done
	echo "placement-local: Placement did not open 127.0.0.1:$PORT in 30 s; see $STATE/uwsgi.log" >&2
	tail -n 30 "$STATE/uwsgi.log" >&2 || true
	return 1
}

stop() {
	if [ -f "$STATE/uwsgi.pid" ]; then
		kill -INT "$(cat "$STATE/uwsgi.pid")" 2>/dev/null || true
		rm -f "$STATE/uwsgi.pid"
		for _ in $(seq 1 20); do port_open "$PORT" || return 0; sleep 0.5; done
		echo "placement-local: 127.0.0.1:$PORT still open 10 s after stop" >&2
	fi
}

env_line() { echo "export SCOUR_E2E_PLACEMENT_URL=http://127.0.0.1:$PORT"; }

case "${1:-start}" in
start) start ;;
stop) stop ;;
env) env_line ;;
*)
	echo "usage: $0 start|stop|env" >&2
	exit 2
	;;
esac
