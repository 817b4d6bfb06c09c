package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// put sends one inventory or traits write through the proxy (what the system
// under test sees) and returns the status and Placement's error code.
func put(t *testing.T, p *Placement, path string, body any) (int, string) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, p.URL()+path, bytes.NewReader(b))
	req.Header.Set("X-Auth-Token", p.Token())
	req.Header.Set("OpenStack-API-Version", "placement "+Microversion)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.HTTPClient().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct {
		Errors []struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		} `json:"errors"`
	}
	_ = json.Unmarshal(raw, &e)
	if len(e.Errors) > 0 {
		return resp.StatusCode, e.Errors[0].Code + ": " + e.Errors[0].Detail
	}
	return resp.StatusCode, ""
}

// atOnce runs f(0) ... f(n-1) in n goroutines released together, and waits.
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// Twenty writers send the same generation at once, through one proxy, to
// Placement's workers: exactly one wins and the proxy counts every request.
// In the default mode the writes really meet in Placement (several workers
// on PostgreSQL); in sqlite mode they queue in front of its one worker.
//
// Every inventory loser gets 409 placement.concurrent_update. A traits
// loser may instead get a 500 saying "Another thread concurrently updated
// the resource provider data": placement 8.0.0's PUT .../traits checks the
// generation first (409) but does not catch the conflict its write detects
// when another request passed the same check at the same time. Only
// concurrent workers show it; scour counts it as a conflict (placement/http.go).
func TestPlacementConcurrentWritersOneWins(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	t.Logf("placement: %s", p.Mode())
	node := p.SeedComputeNode(t, UniqueName("cn"), Device{Address: "0000:af:00.0", VendorID: "8086", ProductID: "0a54", OneTimeUse: true})
	dev := node.Devices[0]
	const writers = 20
	for _, tc := range []struct {
		name    string
		path    string
		body    func(gen, i int, inv Inventory) any
		race500 bool // a lost race may be a 500 (see above)
	}{
		{"inventory", "/resource_providers/" + dev.UUID + "/inventories/" + dev.ResourceClass, func(gen, i int, inv Inventory) any {
			return map[string]any{"resource_provider_generation": gen, "total": inv.Total, "reserved": i % 2,
				"min_unit": inv.MinUnit, "max_unit": inv.MaxUnit, "step_size": inv.StepSize, "allocation_ratio": inv.AllocationRatio}
		}, false},
		{"traits", "/resource_providers/" + dev.UUID + "/traits", func(gen, i int, _ Inventory) any {
			return map[string]any{"resource_provider_generation": gen, "traits": []string{TraitManagedPCIDevice, TraitOneTimeUse, fmt.Sprintf("CUSTOM_WRITER_%d", i)}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range writers {
				p.call(t, http.MethodPut, fmt.Sprintf("/traits/CUSTOM_WRITER_%d", i), Microversion, nil, nil, http.StatusCreated, http.StatusNoContent)
			}
			invs, gen := p.Inventories(t, dev.UUID)
			total0, _ := p.Requests()
			codes := make([]int, writers)
			details := make([]string, writers)
			atOnce(writers, func(i int) {
				codes[i], details[i] = put(t, p, tc.path, tc.body(gen, i, invs[dev.ResourceClass]))
			})
			won, raced := 0, 0
			for i, c := range codes {
				switch {
				case c == http.StatusOK:
					won++
				case c == http.StatusConflict && strings.HasPrefix(details[i], "placement.concurrent_update"):
				case c == http.StatusInternalServerError && tc.race500 && strings.Contains(details[i], "Another thread concurrently updated the resource provider data"):
					raced++
				default:
					t.Errorf("writer %d: HTTP %d %s, want 200 or 409 placement.concurrent_update", i, c, details[i])
				}
			}
			if won != 1 {
				t.Errorf("%d writers won with one generation, want exactly 1 (codes %v)", won, codes)
			}
			if raced > 0 {
				t.Logf("%d of %d losers got placement's 500 for a concurrent traits write", raced, writers-1)
			}
			if total, _ := p.Requests(); total-total0 != writers {
				t.Errorf("proxy counted %d requests, want %d", total-total0, writers)
			}
		})
	}
}

// While one request waits on a database lock, Placement answers others: the
// e2e Placement serves concurrent requests as a production one does. A
// session in the container locks the resource_providers table; a provider
// read queues behind it (seen in pg_stat_activity, no timing involved);
// version discovery still answers; the read completes once the lock goes.
func TestPlacementAnswersWhileAnotherRequestWaits(t *testing.T) {
	t.Parallel()
	if m, err := placementMode(); err == nil && (m.DB != "postgresql" || m.Workers < 2) {
		t.Skipf("placement mode %s answers one request at a time (%s, %s)", m, EnvPlacementDB, EnvPlacementWorkers)
	}
	p := StartPlacement(t, Dedicated())
	node := p.SeedComputeNode(t, UniqueName("cn"))
	locked := make(chan error, 1)
	go func() {
		_, err := p.svc.exec(t.Context(), "postgres", "psql", "-p", "5432", "-d", "placement", "-c",
			"BEGIN; LOCK TABLE resource_providers IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(120); COMMIT;")
		locked <- err
	}()
	psql := func(sql string) string {
		out, err := p.svc.exec(t.Context(), "postgres", "psql", "-p", "5432", "-d", "placement", "-tAc", sql)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	waitFor := func(what, sql string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for psql(sql) == "0" {
			if time.Now().After(deadline) {
				t.Fatalf("not seen within a minute: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("the lock taken", "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(120)%' AND state = 'active' AND pid <> pg_backend_pid()")

	read := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/resource_providers/"+node.UUID, nil)
		req.Header.Set("X-Auth-Token", p.Token())
		resp, err := p.HTTPClient().Do(req)
		if err != nil {
			read <- 0
			return
		}
		resp.Body.Close()
		read <- resp.StatusCode
	}()
	waitFor("the read waiting on the lock", "SELECT count(*) FROM pg_stat_activity WHERE usename = 'placement' AND wait_event_type = 'Lock'")

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/", nil)
	req.Header.Set("X-Auth-Token", p.Token())
	resp, err := p.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("version discovery while a request waits: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("version discovery while a request waits: %s", resp.Status)
	}
	select {
	case code := <-read:
		t.Fatalf("the blocked read answered %d while the lock was held", code)
	default:
	}

	psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(120)%' AND pid <> pg_backend_pid()")
	<-locked // psql reports the terminated session as an error
	if code := <-read; code != http.StatusOK {
		t.Fatalf("the read after the lock went: %d", code)
	}
}

// The fault proxy under concurrent requests: a fault limited to Times
// applies to exactly that many of them, the rest reach Placement, and the
// counters count every one.
func TestFaultProxyUnderConcurrentRequests(t *testing.T) {
	t.Parallel()
	p := StartPlacement(t)
	node := p.SeedComputeNode(t, UniqueName("cn"))
	const requests, times = 20, 5
	total0, faulted0 := p.Requests()
	p.Inject(Fault{Status: http.StatusServiceUnavailable, Times: times})
	codes := make([]int, requests)
	atOnce(requests, func(i int) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/resource_providers/"+node.UUID, nil)
		req.Header.Set("X-Auth-Token", p.Token())
		resp, err := p.HTTPClient().Do(req)
		if err != nil {
			t.Errorf("request %d: %v", i, err)
			return
		}
		resp.Body.Close()
		codes[i] = resp.StatusCode
	})
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[http.StatusServiceUnavailable] != times || count[http.StatusOK] != requests-times {
		t.Errorf("answers %v, want %d x 503 and %d x 200", count, times, requests-times)
	}
	total, faulted := p.Requests()
	if total-total0 != requests || faulted-faulted0 != times {
		t.Errorf("proxy counted %d requests, %d faulted; want %d, %d", total-total0, faulted-faulted0, requests, times)
	}
}
