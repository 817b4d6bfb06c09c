# Cleaning pipeline benchmarks (pipeline/, plugins/).
.PHONY: bench-overwrite
bench: bench-overwrite

## bench-overwrite: overwrite step throughput vs dd oflag=direct on the same file system (ratio, target >= 0.9).
## SCOUR_BENCH_DIR (default /var/tmp) and SCOUR_BENCH_MIB (default 512) choose where and how much.
bench-overwrite:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkOverwriteVsDD$$' -benchtime 1x ./plugins/builtin
