# Placement gate (placement/): benchmark of a host scan against a real
# Placement. Needs SCOUR_E2E_PLACEMENT_URL; `scripts/placement-local.sh
# start` runs one locally and prints the export line.
.PHONY: bench-placement placement-local
bench: bench-placement

bench-placement:
	$(GO) test -run '^$$' -bench BenchmarkScan -benchtime 10x -count 1 ./placement/

placement-local:
	bash scripts/placement-local.sh start
