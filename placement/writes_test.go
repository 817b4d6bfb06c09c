package placement

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A Placement on sqlite answers a write made while another is in flight
// with 500 "database is locked" (issue 33). Un-reserves of many devices at
// once never have more than placement.max_parallel_writes PUTs in flight,
// so scour's own parallelism causes no 5xx, and every write sent is
// counted in scour_placement_write_wait_seconds.
func TestWritesBoundedPerHost(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			var inFlight, most, locked atomic.Int32
			f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/inventories/"):
					n := inFlight.Add(1)
					defer inFlight.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if int(n) > limit {
						locked.Add(1)
						w.WriteHeader(http.StatusInternalServerError)
						io.WriteString(w, databaseLocked)
						return
					}
					time.Sleep(10 * time.Millisecond) // the write holds the database
					io.WriteString(w, `{"resource_provider_generation": 8}`)
				default:
					serveDirtyDevice(w, r)
				}
			}}
			srv := startFake(t, f)
			cfg := unitConfig(srv.URL)
			cfg.MaxParallelWrites = limit
			reg := prometheus.NewRegistry()
			c, err := New(context.Background(), cfg, WithRegisterer(reg), WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			before := histogramCount(t, reg, "scour_placement_write_wait_seconds") // New's trait check
			const devices = 8
			unreserveAtOnce(t, c, devices)
			if m := most.Load(); int(m) > limit {
				t.Errorf("%d un-reserve PUTs in flight at once, want at most placement.max_parallel_writes = %d", m, limit)
			}
			if n := locked.Load(); n != 0 {
				t.Errorf("Placement answered %d PUTs with 500 database is locked, want none caused by scour's own parallelism", n)
			}
			if got := histogramCount(t, reg, "scour_placement_write_wait_seconds") - before; got != devices {
				t.Errorf("writes counted = %d, want %d", got, devices)
			}
		})
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// A Placement that fails concurrent writers (sqlite's "database is
// locked", here for any two writes at once) answers scour's first
// overlapping writes with 500; from then on this host writes one at a
// time, so its own parallelism costs at most the writes already in
// flight, not a 500 for every pair of writes.
func TestWritesGoOneAtATimeAfterAServerError(t *testing.T) {
	t.Parallel()
	var inFlight, locked atomic.Int32
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/inventories/"):
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			time.Sleep(10 * time.Millisecond) // the write holds the database
			if n > 1 || inFlight.Load() > 1 {
				locked.Add(1)
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, databaseLocked)
				return
			}
			io.WriteString(w, `{"resource_provider_generation": 8}`)
		default:
			serveDirtyDevice(w, r)
		}
	}}
	srv := startFake(t, f)
	cfg := unitConfig(srv.URL)
	cfg.MaxParallelWrites = 4
	reg := prometheus.NewRegistry()
	c, err := New(context.Background(), cfg, WithRegisterer(reg), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	unreserveAtOnce(t, c, 16)
	// The writes in flight when the first 500 came (at most 4) fail, and
	// so may the first one-at-a-time writes that overlap them; after that
	// every write is alone. Without the one-at-a-time period this run got
	// 48.
	if n := locked.Load(); n == 0 || n > 2*4 {
		t.Errorf("Placement answered %d PUTs with 500 database is locked, want 1 to 8 (only writes overlapping the first failures)", n)
	}
	if got := testutil.ToFloat64(c.metrics.writeConcurrency); got != 1 {
		t.Errorf("scour_placement_write_concurrency = %v, want 1 after a server error", got)
	}
}

// unreserveAtOnce un-reserves n devices of the fake at once, as n
// cleanings ending together do, and fails t for each that failed.
func unreserveAtOnce(t *testing.T, c *Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := Ref{UUID: fmt.Sprintf("0b5a3b53-3e43-4a6a-9b36-1df0c0c5b9%02x", i), Name: fmt.Sprintf("cn_1_0000:%02X:00.0", 0x81+i)}
			dev.Address, _ = parseAddress(dev.Name)
			errs[i] = c.Unreserve(context.Background(), dev, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("device %d: %v", i, err)
		}
	}
}

// databaseLocked is what a Placement on sqlite answers a write that met
// another (HTTP 500).
const databaseLocked = `{"errors": [{"status": 500, "detail": "(sqlite3.OperationalError) database is locked"}]}`

// serveDirtyDevice answers the write-pacing fakes' reads: every device is
// fully reserved, unallocated and one-time-use at generation 7.
func serveDirtyDevice(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/inventories"):
		io.WriteString(w, dirtyInventory)
	case strings.HasSuffix(r.URL.Path, "/allocations"):
		io.WriteString(w, `{"resource_provider_generation": 7, "allocations": {}}`)
	case strings.HasSuffix(r.URL.Path, "/traits"):
		io.WriteString(w, `{"resource_provider_generation": 7, "traits": ["HW_PCI_ONE_TIME_USE"]}`)
	default:
		http.NotFound(w, r)
	}
}

// A 500 "database is locked" says Placement runs on sqlite, which fails
// concurrent writers for good: this host then writes one at a time until
// scourd restarts. Any other 500 or 503 makes it do so for
// serialWritesFor only.
func TestSqliteLockedWritesStayOneAtATime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		serial bool // an hour later
	}{
		{name: "sqlite's database is locked", status: http.StatusInternalServerError, body: databaseLocked, serial: true},
		{name: "another 500", status: http.StatusInternalServerError, body: `{"errors": [{"status": 500, "detail": "boom"}]}`},
		{name: "a 503", status: http.StatusServiceUnavailable, body: `{"errors": [{"status": 503, "detail": "Service Unavailable"}]}`},
		{name: "a 503 naming a lock", status: http.StatusServiceUnavailable, body: `{"errors": [{"status": 503, "detail": "database is locked"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var failed atomic.Bool
			var inFlight, most atomic.Int32
			f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPut && failed.CompareAndSwap(false, true):
					w.WriteHeader(tc.status)
					io.WriteString(w, tc.body)
				case r.Method == http.MethodPut:
					n := inFlight.Add(1)
					defer inFlight.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(10 * time.Millisecond) // the write holds the database
					io.WriteString(w, `{"resource_provider_generation": 8}`)
				default:
					serveDirtyDevice(w, r)
				}
			}}
			cfg := unitConfig(startFake(t, f).URL)
			cfg.MaxParallelWrites = 2
			c, err := New(context.Background(), cfg, WithRegisterer(prometheus.NewRegistry()), WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			clk := &fakeClock{t: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
			c.now = clk.now
			unreserveAtOnce(t, c, 1)
			if got := testutil.ToFloat64(c.metrics.writeConcurrency); got != 1 || !failed.Load() {
				t.Fatalf("after the server error: scour_placement_write_concurrency = %v (failed %v), want 1", got, failed.Load())
			}
			clk.advance(time.Hour)
			most.Store(0)
			unreserveAtOnce(t, c, 4)
			want := 2.0
			if tc.serial {
				want = 1
				if m := most.Load(); m != 1 {
					t.Errorf("an hour later: %d un-reserve PUTs in flight at once, want 1", m)
				}
			}
			if got := testutil.ToFloat64(c.metrics.writeConcurrency); got != want {
				t.Errorf("an hour later: scour_placement_write_concurrency = %v, want %v", got, want)
			}
		})
	}
}
