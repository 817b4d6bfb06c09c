# Glance image benchmarks (e2e/glance/bench_test.go), against the e2e
# harness's real Glance, all in one run: curl | sha512sum of the image (the
# floor), scour's fetch-and-verify into an empty cache, and a cache hit;
# then the ratios docs/images.md reports (targets: fetch >= 0.8x the curl
# pipeline's throughput; a cache hit moves no image bytes).
.PHONY: bench-images
bench: bench-images

IMAGES_BENCHTIME ?= 5x

bench-images: test-env
	{ $(GO) test -run '^$$' -bench '^BenchmarkImages$$' -benchtime $(IMAGES_BENCHTIME) -count 1 ./e2e/glance || echo BENCH-IMAGES-FAILED; } | awk ' \
		{ print } \
		/^BENCH-IMAGES-FAILED/ { failed = 1 } \
		/^BenchmarkImages\/fetch-vs-curl/ { for (i = 2; i < NF; i++) { if ($$(i+1) == "fetch/curl") ratio = $$i; if ($$(i+1) == "fetch-ms") fetch = $$i } } \
		/^BenchmarkImages\/cache-hit/ { for (i = 2; i < NF; i++) if ($$(i+1) == "hit-ms") hit = $$i } \
		END { if (ratio > 0 && fetch > 0 && hit > 0) printf "\nfetch-and-verify throughput: %.2fx curl | sha512sum (target >= 0.8); cache hit: %.1f%% of a fetch, no image bytes downloaded\n", ratio, 100 * hit / fetch; if (failed) exit 1 }'
