# Ingest path (notification/, bus/): short fuzzing in `make test`, and the
# end-to-end ingest benchmark in `make bench`.
.PHONY: fuzz-short bench-ingest bench-decode

FUZZTIME ?= 10s

## fuzz-short: fuzz the notification decoder briefly (CI runs it in `make test`).
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./notification/

test: fuzz-short

## bench-decode: in-process decode+dispatch throughput.
bench-decode:
	$(GO) test -run '^$$' -bench BenchmarkDecodeDispatch -benchtime 2s ./notification/

## bench-ingest: notifications/second through the real broker, scour's
## ingest path against a bare amqp091-go consume-and-ack loop (ratio >= 0.8).
bench-ingest: test-env
	$(GO) run ./bus/benchingest $(BENCH_INGEST_FLAGS)

bench: bench-decode bench-ingest
