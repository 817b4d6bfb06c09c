# The demo (README's first command): the e2e harness's RabbitMQ and
# Placement, one scourd on simulated hardware with four one-time-use
# devices, an instance booted and deleted; narrated on stdout. The same
# test (TestDemo, e2e/demo_test.go) runs quietly in `make test`.
.PHONY: demo

## demo: watch a device go dirty -> cleaning (progress) -> available, and print its cleaning record.
demo: e2e-env
	SCOUR_DEMO_NARRATE=1 $(GO) test -count=1 -v -run '^TestDemo$$' ./e2e/
