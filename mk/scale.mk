# Fleet scale benchmark (docs/scale.md).
.PHONY: bench-fleet

## bench-fleet: N hosts against the real broker and Placement (e2e
## containers): 2 real scourd processes on simulated hardware plus host
## stand-ins (a per-host quorum queue each, a scourd's Placement reads per
## command and per jittered scan) up to 1,000 host queues; a storm of
## deletes, broadcasts and scans per step; prints Placement requests/s,
## broker memory per host queue, delete-to-returned p50/p99 and their
## growth. About 6 minutes. Flags: SCOUR_BENCH_FLEET_HOSTS (default
## 100,300,1000), SCOUR_BENCH_FLEET_PHASE (storm per step, default 30s),
## SCOUR_BENCH_FLEET_BASELINE=1 (the design before routed broadcasts:
## every broadcast to every host, one Placement read per host each).
bench-fleet: e2e-env
	SCOUR_BENCH_FLEET=1 $(GO) test -count=1 -timeout 10m -run '^TestBenchFleet$$' -v ./e2e/
