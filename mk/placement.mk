# Placement gate (placement/): benchmark of a host scan against a real
# Placement: the e2e harness's container, or SCOUR_E2E_PLACEMENT_URL when set
# (`make placement-local` runs one without containers and prints the line).
.PHONY: bench-placement placement-local
bench: bench-placement

bench-placement:
	$(GO) test -run '^$$' -bench BenchmarkScan -benchtime 10x -count 1 ./placement/

placement-local:
	bash scripts/placement-local.sh start
