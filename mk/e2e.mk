# End-to-end test environment: real RabbitMQ and OpenStack Placement in
# podman containers, driven from Go tests by e2e/harness (docs/e2e.md).
.PHONY: e2e-env e2e-images e2e-socket e2e

# `make test` prepares the e2e environment too: installs podman/runc/
# debootstrap when missing, starts podman's socket, builds the images.
test-env: e2e-env

## e2e-env: everything the e2e tests need (packages, podman socket, images).
e2e-env:
	bash scripts/e2e-env.sh all

## e2e-images: build the RabbitMQ, Placement and Glance images (only when the recipe changed).
e2e-images:
	bash scripts/e2e-env.sh images

## e2e-socket: start podman's Docker-compatible socket when none answers.
e2e-socket:
	bash scripts/e2e-env.sh socket

## e2e: the e2e harness and scenario tests.
e2e: e2e-env
	$(GO) test $(TESTFLAGS) ./e2e/...

## bench-lifecycle: release-to-pool of scourd vs Nova's sample listener
## (real broker and Placement, simulated hardware; docs/operations.md).
.PHONY: bench-lifecycle
bench: bench-lifecycle
# Three times: Placement on PostgreSQL answering from one uwsgi worker,
# then from several (BENCH_PLACEMENT_WORKERS), where scour's parallel
# writes meet in it, then several on one sqlite file (Placement's packaged
# default on a small deployment, where concurrent writes get 500 "database
# is locked"). BENCH_PLACEMENT_MODES (db:workers ...) picks others.
BENCH_PLACEMENT_WORKERS ?= 4
BENCH_PLACEMENT_MODES ?= postgresql:1 postgresql:$(BENCH_PLACEMENT_WORKERS) sqlite:$(BENCH_PLACEMENT_WORKERS)
bench-lifecycle: e2e-env
	set -e; for m in $(BENCH_PLACEMENT_MODES); do \
		SCOUR_E2E_PLACEMENT_DB=$${m%%:*} SCOUR_E2E_PLACEMENT_WORKERS=$${m##*:} SCOUR_BENCH_LIFECYCLE=1 $(GO) test -count=1 -timeout 15m -run '^TestBenchLifecycle$$' -v ./e2e/ | grep -v '^=== \|^--- \|^PASS\|^ok '; \
	done
