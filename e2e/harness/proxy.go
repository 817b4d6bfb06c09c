package harness

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what the proxy in front of Placement does to requests instead of
// (or before) forwarding them.
type Fault struct {
	// Status, when non-zero, answers every request with this status and a
	// Placement-style JSON error body instead of forwarding it.
	Status int
	// Delay holds each request this long (or until its client gives up)
	// before answering it, forwarding it or failing it with Status.
	Delay time.Duration
	// Times limits the fault to this many requests; 0 means until Heal.
	Times int
	// Method, when set, limits the fault to requests of this method
	// (other requests pass untouched and do not count towards Times).
	Method string
	// PathSuffix, when set, limits the fault to requests whose path ends
	// with it (Glance's image data: "/file").
	PathSuffix string
	// LoseAnswer forwards the request first, so that it takes effect, and
	// then holds Placement's answer for Delay and replaces it with Status
	// (a write that landed while its answer was lost).
	LoseAnswer bool
	// StallBody forwards the request and sends the answer's headers and
	// the first half of its body, then sends nothing more until the client
	// gives up: a read that stalls mid-download.
	StallBody bool
}

// faultProxy is a reverse proxy to one Placement backend whose behaviour a
// test switches at run time.
type faultProxy struct {
	srv      *httptest.Server
	mu       sync.Mutex
	target   *url.URL
	fault    Fault
	left     int // requests the fault still applies to when fault.Times > 0
	requests atomic.Int64
	faulted  atomic.Int64
	// transport keeps connections to the backend for every request in
	// flight, as a load balancer in front of Placement does.
	transport *http.Transport
	// observe, when set, sees every answer the backend gives (Keystone's
	// proxy records the tokens it issues).
	observe func(*http.Response)
}

// backendTransport is http.DefaultTransport with an idle pool as large as
// the concurrency the system under test reaches (scourd runs dozens of
// cleanings at once). The default keeps 2 idle connections per host: under
// concurrent requests the proxy would open a connection for most requests
// and close it after, piling up TIME_WAIT sockets and adding connection
// setup to what Placement seems to cost.
func backendTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 128
	return t
}

// close stops the proxy and drops its connections to the backend.
func (p *faultProxy) close() {
	p.srv.Close()
	p.transport.CloseIdleConnections()
}

func newFaultProxy(target string) (*faultProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &faultProxy{target: u, transport: backendTransport()}
	rp := &httputil.ReverseProxy{
		Transport: p.transport,
		Rewrite: func(r *httputil.ProxyRequest) {
			p.mu.Lock()
			t := p.target
			p.mu.Unlock()
			r.SetURL(t)
			r.Out.Host = r.In.Host
		},
		ModifyResponse: func(r *http.Response) error {
			if p.observe != nil {
				p.observe(r)
			}
			return nil
		},
		// A stopped backend is an expected state in these tests: answer
		// 502 like a load balancer would, without logging each request.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writePlacementError(w, http.StatusBadGateway)
		},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		f, on := p.take(r.Method, r.URL.Path)
		if on && f.LoseAnswer {
			p.faulted.Add(1)
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			select {
			case <-time.After(f.Delay):
			case <-r.Context().Done():
				return
			}
			writePlacementError(w, f.Status)
			return
		}
		if on && f.StallBody {
			p.faulted.Add(1)
			stallBody(w, r, rp)
			return
		}
		if on {
			p.faulted.Add(1)
			if f.Delay > 0 {
				select {
				case <-time.After(f.Delay):
				case <-r.Context().Done():
					return
				}
			}
			if f.Status != 0 {
				writePlacementError(w, f.Status)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	return p, nil
}

// take returns the fault for one request of method and path and counts it
// down.
func (p *faultProxy) take(method, path string) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.fault
	if (f.Status == 0 && f.Delay == 0 && !f.StallBody) || (f.Method != "" && f.Method != method) || !strings.HasSuffix(path, f.PathSuffix) {
		return f, false
	}
	if f.Times > 0 {
		p.left--
		if p.left <= 0 {
			p.fault = Fault{}
		}
	}
	return f, true
}

func (p *faultProxy) set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault, p.left = f, f.Times
}

func writePlacementError(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OpenStack-API-Version", "placement 1.39")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"errors": [{"status": %d, "title": %q, "detail": "injected by the scour e2e harness", "code": "placement.undefined_code", "request_id": "req-%s"}]}`,
		status, http.StatusText(status), uuid4())
}

// stallBody answers with the backend's headers and half its body, then
// holds the connection open, sending nothing, until the client leaves.
func stallBody(w http.ResponseWriter, r *http.Request, rp http.Handler) {
	rec := httptest.NewRecorder()
	rp.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	body := rec.Body.Bytes()
	_, _ = w.Write(body[:len(body)/2])
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	<-r.Context().Done()
}
