# Container image without a registry: debootstrap + podman import, the same
# layout as the Dockerfile (docs/operations.md). Not part of `make test`.
.PHONY: image image-bin image-verify image-save

## image-bin: the binaries the image carries (as `make build`).
image-bin:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/scourd ./cmd/scourctl ./cmd/scour-gpu-scrub

## image: localhost/scour:$(VERSION) and :latest, verified by running them.
image: image-bin
	VERSION='$(VERSION)' BIN='$(BIN)' bash scripts/image.sh build

## image-verify: run the image's checks again (version, config, tools, metadata).
image-verify:
	VERSION='$(VERSION)' BIN='$(BIN)' bash scripts/image.sh verify

## image-save: $(BIN)/scour-image.tar for hosts without a registry (podman/docker load -i).
image-save: image
	VERSION='$(VERSION)' BIN='$(BIN)' bash scripts/image.sh save
