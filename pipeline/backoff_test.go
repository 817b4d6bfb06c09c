package pipeline

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scour-project/scour/plugins"
)

// TestStepRetryWaitsCapped: the waits between a step's tries double from
// retry.backoff, jittered by ±20 %, and never exceed retry.max_backoff
// (5m by default); the step still gets exactly retry.attempts tries. The
// engine's sleep is replaced, so the test records the waits without
// waiting them.
func TestStepRetryWaitsCapped(t *testing.T) {
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	for _, tc := range []struct {
		name  string
		retry Retry
		// lo and hi bound each wait, in order.
		lo, hi []time.Duration
	}{
		{name: "max_backoff set", retry: Retry{Attempts: 7, Backoff: time.Second, MaxBackoff: 4 * time.Second},
			lo: []time.Duration{sec(0.8), sec(1.6), sec(3.2), sec(4), sec(4), sec(4)},
			hi: []time.Duration{sec(1.2), sec(2.4), sec(4), sec(4), sec(4), sec(4)}},
		{name: "default cap", retry: Retry{Attempts: 9, Backoff: 10 * time.Second},
			lo: []time.Duration{sec(8), sec(16), sec(32), sec(64), sec(128), sec(256), sec(300), sec(300)},
			hi: []time.Duration{sec(12), sec(24), sec(48), sec(96), sec(192), sec(300), sec(300), sec(300)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := pluginStep("a")
			st.Retry = tc.retry
			h := newHarness(t, testConfig(st))
			h.pr.clean["a"] = failN(100, plugins.CodeTryAgainLater)
			var mu sync.Mutex
			var waits []time.Duration
			h.e.sleep = func(_ context.Context, d time.Duration) bool {
				mu.Lock()
				defer mu.Unlock()
				waits = append(waits, d)
				return true
			}
			res := h.clean(t, target(1))
			if res.Verdict != VerdictRetryLater || len(res.Steps) != 1 || res.Steps[0].Attempts != tc.retry.Attempts {
				t.Fatalf("verdict %s, steps %+v; want retry-later after %d tries", res.Verdict, res.Steps, tc.retry.Attempts)
			}
			if len(waits) != len(tc.lo) {
				t.Fatalf("waits %v; want %d", waits, len(tc.lo))
			}
			for i, w := range waits {
				if w < tc.lo[i] || w > tc.hi[i] {
					t.Errorf("wait %d = %s; want within [%s, %s] (all waits %v)", i+1, w, tc.lo[i], tc.hi[i], waits)
				}
			}
		})
	}
}

// TestStepRetryWaitsJittered: two devices that failed together do not
// wait the same: of many first waits, not all are the configured backoff.
func TestStepRetryWaitsJittered(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		w, _ := Retry{Backoff: time.Second, MaxBackoff: time.Minute}.waits().Next()
		seen[w] = true
	}
	if len(seen) < 2 {
		t.Fatalf("50 first waits were all %v: no jitter", seen)
	}
}

// TestStepRetryCancelledWait: a shutdown during the wait ends the step
// with its last failure and no further try.
func TestStepRetryCancelledWait(t *testing.T) {
	st := pluginStep("a")
	st.Retry = Retry{Attempts: 3, Backoff: time.Hour}
	h := newHarness(t, testConfig(st))
	h.pr.clean["a"] = failN(100, plugins.CodeTryAgainLater)
	ctx, cancel := context.WithCancel(context.Background())
	h.e.sleep = func(context.Context, time.Duration) bool { cancel(); return false }
	if res, err := h.e.Clean(ctx, target(1)); err == nil {
		t.Fatalf("a shutdown during the wait gave a verdict: %+v", res)
	}
	if calls := h.pr.Calls(); len(calls) != 1 {
		t.Fatalf("plugin calls %v; want the one try before the wait", calls)
	}
}

func TestMaxBackoffShorterThanBackoffRefused(t *testing.T) {
	_, err := ParseConfig([]byte(`
profiles:
  - name: nvme
    match: {resource_classes: [CUSTOM_NVME]}
    pipeline:
      name: p
      version: 1
      steps:
        - {name: erase, type: nvme-erase, retry: {attempts: 3, backoff: 1m, max_backoff: 30s}}
`))
	if err == nil || !strings.Contains(err.Error(), "max_backoff") {
		t.Fatalf("max_backoff shorter than backoff: %v", err)
	}
}
