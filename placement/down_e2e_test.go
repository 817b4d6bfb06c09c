package placement

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
)

// flakyProxy forwards to Placement until down is set; then it hangs up on
// every request without answering (a crashed Placement or a dropped
// connection mid-call, as the client sees it).
type flakyProxy struct {
	*httptest.Server
	down atomic.Bool
}

func newFlakyProxy(t *testing.T, target string) *flakyProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func TestE2EPlacementDownMidCall(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1})
	proxy := newFlakyProxy(t, env.Backend)
	c := newE2EClient(t, testEnv{URL: proxy.URL, Backend: env.Backend, Token: env.Token}, h.Node)
	ctx := context.Background()

	// Placement goes away after scour verified the device and before its
	// PUT: the un-reserve must fail recoverably and change nothing.
	c.beforeInventoryWrite = func(context.Context, string) { proxy.down.Store(true) }
	err := c.Unreserve(ctx, dev, nil)
	if !IsRecoverable(err) {
		t.Fatalf("Unreserve with Placement down mid-call: %v, want recoverable", err)
	}
	if h.reserved(dev) != 1 {
		t.Fatal("device un-reserved although the call failed")
	}
	// Reads fail recoverably too.
	if _, err := c.Scan(ctx); !IsRecoverable(err) {
		t.Errorf("Scan with Placement down: %v, want recoverable", err)
	}
	// Placement is back: the retry later succeeds, exactly once.
	proxy.down.Store(false)
	c.beforeInventoryWrite = nil
	if err := c.Unreserve(ctx, dev, nil); err != nil {
		t.Fatalf("Unreserve after Placement came back: %v", err)
	}
	if h.reserved(dev) != 0 {
		t.Error("device still reserved after a successful Unreserve")
	}
}
