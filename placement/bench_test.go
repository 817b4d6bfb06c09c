package placement

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// BenchmarkScan scans a host with 8 and 64 OTU devices on a real Placement
// and compares with a baseline measured in the same run: the naive scan
// (one filtered list, then per device inventories, usages, allocations and
// traits, one device after another, as Nova's sample listener does).
// Reported: calls/scan, baseline-calls/scan, call-ratio-x (baseline/scour)
// and speedup-x (baseline time/scour time).
func BenchmarkScan(b *testing.B) {
	env := testPlacement(b)
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			h := seedNode(b, env)
			for i := range n {
				s := devSpec{Addr: fmt.Sprintf("0000:%02x:00.0", 0x10+i)}
				switch i % 4 {
				case 1:
					s.Reserved = 1 // dirty
				case 2:
					s.Consumer, s.Reserved = newUUID(), 1 // burned-in-use
				}
				h.seedDevice(s)
			}
			c := newE2EClient(b, env, h.Node)
			ctx := context.Background()
			if _, err := c.Scan(ctx); err != nil { // finds the node once
				b.Fatal(err)
			}
			const baseRuns = 3
			var baseCalls int
			t0 := time.Now()
			for range baseRuns {
				baseCalls = naiveScan(b, c, h.NodeUUID)
			}
			baseline := time.Since(t0) / baseRuns

			var calls, iters int
			t1 := time.Now()
			for b.Loop() {
				res, err := c.Scan(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Devices) != n {
					b.Fatalf("scan found %d devices, want %d", len(res.Devices), n)
				}
				calls = res.Calls
				iters++
			}
			per := time.Since(t1) / time.Duration(iters)
			b.ReportMetric(float64(calls), "calls/scan")
			b.ReportMetric(float64(baseCalls), "baseline-calls/scan")
			b.ReportMetric(float64(baseCalls)/float64(calls), "call-ratio-x")
			b.ReportMetric(float64(baseline)/float64(per), "speedup-x")
		})
	}
}

// naiveScan is the baseline: serial, four reads per device.
func naiveScan(b *testing.B, c *Client, node string) int {
	b.Helper()
	ctx := context.Background()
	calls := 1
	var list struct {
		Providers []provider `json:"resource_providers"`
	}
	q := url.Values{"in_tree": {node}, "required": {c.cfg.OneTimeUseTrait}}
	if err := c.do(ctx, http.MethodGet, "resource_providers?"+q.Encode(), nil, &list, http.StatusOK); err != nil {
		b.Fatal(err)
	}
	for _, p := range list.Providers {
		for _, sub := range []string{"inventories", "usages", "allocations", "traits"} {
			var out map[string]any
			if err := c.do(ctx, http.MethodGet, "resource_providers/"+p.UUID+"/"+sub, nil, &out, http.StatusOK); err != nil {
				b.Fatal(err)
			}
			calls++
		}
	}
	return calls
}
