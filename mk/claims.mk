# Claims store benchmarks (claims/bench_test.go): claim write and read
# latency, the cost of one run checkpoint and of one whole cleaning's
# record, on sqlite and PostgreSQL, wall and CPU time, with the
# PostgreSQL/sqlite ratio per operation measured in the same run; then the
# same cleaning through the engine's checkpoint interface
# (claims/pipelinestore, sqlite).
.PHONY: bench-claims
bench: bench-claims

CLAIMS_BENCHTIME ?= 300x

# The awk table reads the benchmark lines; a failed `go test` is passed
# through as a marker line so that make still fails.
bench-claims: test-env
	{ $(GO) test -run '^$$' -bench '^BenchmarkStore$$' -benchtime $(CLAIMS_BENCHTIME) -count 1 ./claims || echo BENCH-CLAIMS-FAILED; } | awk ' \
		{ print } \
		/^BENCH-CLAIMS-FAILED/ { failed = 1 } \
		/^BenchmarkStore\// { split($$1, p, "/"); op = p[3]; sub(/-[0-9]+$$/, "", op); ns[p[2] "/" op] = $$3; cpu[p[2] "/" op] = $$5; if (!(op in seen)) { seen[op] = 1; order[n++] = op } } \
		END { \
			printf "\n%-16s %14s %14s %16s %16s %10s\n", "operation", "sqlite ns/op", "sqlite cpu-us", "postgres ns/op", "postgres cpu-us", "pg/sqlite"; \
			for (i = 0; i < n; i++) { o = order[i]; s = ns["sqlite/" o]; q = ns["postgres/" o]; \
				printf "%-16s %14.0f %14.0f %16.0f %16.0f %10s\n", o, s, cpu["sqlite/" o], q, cpu["postgres/" o], (s > 0 && q > 0) ? sprintf("%.2f", q / s) : "n/a" } \
			if (failed) exit 1 }'
	$(GO) test -run '^$$' -bench '^BenchmarkCleaningRecord$$' -benchtime $(CLAIMS_BENCHTIME) -count 1 ./claims/pipelinestore
	{ $(GO) test -run '^$$' -bench '^BenchmarkPreviousTenant$$' -benchtime 2000x -count 1 ./claims || echo BENCH-CLAIMS-FAILED; } | awk ' \
		{ print } \
		/^BENCH-CLAIMS-FAILED/ { failed = 1 } \
		/claims=100-/ { small = $$3 } /claims=10000-/ { large = $$3 } \
		END { printf "\nprevious tenant, 10,000 vs 100 claims in the history: %s\n", (small > 0) ? sprintf("%.2fx the time", large / small) : "n/a"; if (failed) exit 1 }'
