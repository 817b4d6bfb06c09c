# syntax=docker/dockerfile:1
# Scour container image: scourd (the per-host worker) and scourctl.
#
#   docker build -t scour:dev .            # or: podman build -t scour:dev .
#   docker run --rm scour:dev --version      # the entry point is scourd
#
# Without a reachable registry, `make image` (scripts/image.sh) builds the
# same layout from a Debian mirror; keep the package list below in step
# with the one in scripts/image.sh.
#
# Stage 1 builds with CGO_ENABLED=0: scourd and scourctl are static (no libc
# dependency, so the same binary runs on any distribution the compute hosts
# use); scour-gpu-scrub, the built-in GPU scrubber, loads the node's
# libcuda at run time and so links the dynamic loader and glibc.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/scour-project/scour/version.Version=${VERSION}" \
      -o /out/ ./cmd/scourd ./cmd/scourctl ./cmd/scour-gpu-scrub

# Stage 2: a small Debian base rather than an empty image, because cleaning
# pipelines run host tools against the devices. The tools the default
# configuration names (hardware.tools): nvme-cli (nvme), iproute2
# (devlink); pciutils (lspci) for operators. nvidia-smi must match the
# node's NVIDIA driver, so it is not baked in: the NVIDIA container toolkit
# mounts the node's into the pod, with libcuda.so.1 and libnvidia-ml.so.1
# for scour-gpu-scrub. Add the tools your plugins use here.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates iproute2 nvme-cli pciutils \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/scourd /out/scourctl /out/scour-gpu-scrub /usr/local/bin/
COPY deploy/scour.yaml /etc/scour/scour.yaml
# /metrics, /healthz, /readyz (http.address)
EXPOSE 9464
# scourd stops gracefully on SIGTERM within bus.shutdown_timeout.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/scourd"]
CMD ["--config", "/etc/scour/scour.yaml"]
