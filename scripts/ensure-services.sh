#!/usr/bin/env bash
# Starts the local RabbitMQ and PostgreSQL the integration tests use, when
# they are installed but not running (the development and CI machines run
# both; this only repairs a stopped one). Prints what it did.
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
	local port=$1 name=$2
	for _ in $(seq 1 60); do port_open "$port" && return 0; sleep 1; done
	echo "ensure-services: $name did not open 127.0.0.1:$port within 60s" >&2
	return 1
}

if ! port_open 5672; then
	if command -v rabbitmq-server >/dev/null; then
		echo "ensure-services: starting RabbitMQ"
		rabbitmq-server -detached || true
		wait_port 5672 RabbitMQ
	else
		echo "ensure-services: RabbitMQ is not installed; install rabbitmq-server or set SCOUR_TEST_AMQP_URL" >&2
		exit 1
	fi
fi

if ! port_open 5432; then
	if command -v pg_ctlcluster >/dev/null; then
		echo "ensure-services: starting PostgreSQL"
		pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
		wait_port 5432 PostgreSQL
	else
		echo "ensure-services: PostgreSQL is not installed; install postgresql or set SCOUR_TEST_POSTGRES_DSN" >&2
		exit 1
	fi
fi
echo "ensure-services: RabbitMQ 127.0.0.1:5672 and PostgreSQL 127.0.0.1:5432 are up"
