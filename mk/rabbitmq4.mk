# RabbitMQ 4 (Debian trixie's rabbitmq-server, 4.0.5): the bus and scourctl
# integration tests run once more against it, in a container built by
# scripts/rabbitmq4.sh (debootstrap once, about a minute; afterwards the
# container and the tests take about 30 s). The rest of `make test` runs
# against the local 3.x broker (docs/operations.md, Upgrades).
.PHONY: test-rabbitmq4 test-e2e-rabbitmq4
test: test-rabbitmq4

## test-rabbitmq4: the bus and scourctl tests against RabbitMQ 4 in a container.
test-rabbitmq4:
	GO=$(GO) bash scripts/rabbitmq4.sh test

## test-e2e-rabbitmq4: the whole e2e suite with RabbitMQ 4 as its broker (a few minutes; not in make test).
test-e2e-rabbitmq4: e2e-env
	GO=$(GO) bash scripts/rabbitmq4.sh e2e
