# Scour build and test entry points. `make test` is the one command CI and
# newcomers run; it installs and starts what the tests need (see mk/*.mk).
GO       ?= go
BIN      ?= bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/scour-project/scour/version.Version=$(VERSION)
# Packages under test; e2e scenarios live in ./e2e/... and run in the same go test.
PKGS     ?= ./...
TESTFLAGS ?= -count=1 -timeout 25m

.PHONY: all build test test-env unit lint bench fmt clean man
all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## test: unit, integration (real RabbitMQ/PostgreSQL) and e2e (containers) tests.
test: test-env
	$(GO) test $(TESTFLAGS) $(PKGS)
	$(GO) test -count=1 -tags mangen -run TestManPages ./cmd/scourctl

## man: scourctl's man pages (one per command) in $(BIN)/man (cobra/doc,
## built in only with -tags mangen).
man:
	rm -rf $(BIN)/man
	$(GO) run -tags mangen ./cmd/scourctl gen-man $(BIN)/man

## unit: tests that need nothing but Go (no broker, database or containers).
unit:
	SCOUR_TEST_UNIT_ONLY=1 $(GO) test -count=1 -short ./...

## test-env: start the local services the integration tests use.
test-env:
	bash scripts/ensure-services.sh

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## bench: every benchmark that prints a ratio against its baseline (mk/*.mk add to it).
bench:

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)

include $(wildcard mk/*.mk)
