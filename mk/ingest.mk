# Ingest path (notification/, bus/): short fuzzing in `make test`, and the
# decode and end-to-end ingest benchmarks in `make bench`.
.PHONY: fuzz-short bench-ingest bench-decode

INGEST_FUZZTIME ?= 8s

## fuzz-short: fuzz the notification decoder and its fast path briefly
## (CI runs it in `make test`; longer: make fuzz-short INGEST_FUZZTIME=5m).
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(INGEST_FUZZTIME) ./notification/
	$(GO) test -run '^$$' -fuzz '^FuzzFastPath$$' -fuzztime $(INGEST_FUZZTIME) ./notification/

test: fuzz-short

## bench-decode: in-process decode+dispatch cost per notification.
bench-decode:
	$(GO) test -run '^$$' -bench BenchmarkDecodeDispatch -benchtime 2s ./notification/

## bench-ingest: notifications/second through the real broker, scour's
## ingest path against a bare amqp091-go consume-and-ack loop on the same
## messages, printed as a ratio (target >= 0.8). Flags: BENCH_INGEST_FLAGS
## (e.g. "-n 20000 -ignored 0.9 -prefetch 64").
bench-ingest: test-env
	$(GO) run ./bus/benchingest $(BENCH_INGEST_FLAGS)

bench: bench-decode bench-ingest
