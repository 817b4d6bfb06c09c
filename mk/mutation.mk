# Mutation check of the safety rules' decision code (docs/lifecycle.md,
# "Mutation check"): each mutation in scripts/mutation/mutations.go is
# applied through go test -overlay and must make a unit test fail. Unit
# tests only (no broker, database or containers).
.PHONY: mutation
mutation:
	$(GO) run ./scripts/mutation

# About 2.5 minutes on 2 shared CPUs (under 1 CPU-minute): part of make test.
test: mutation
