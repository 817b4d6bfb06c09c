package placement

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scour-project/scour/internal/testkit"
)

// downKeystone is fakeKeystone behind a switch: while down, every request
// (logins and the version document) answers 503, as a Keystone behind a
// load balancer with no backend does.
type downKeystone struct {
	k      *fakeKeystone
	down   atomic.Bool
	probes atomic.Int64 // requests that are no login (the version document)
	// placementDown makes Placement answer 503 (keystoneDownPlacement).
	placementDown atomic.Bool
}

func (d *downKeystone) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		d.probes.Add(1)
	}
	if d.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	d.k.ServeHTTP(w, r)
}

// keystoneDownPlacement is a dirty device in a Placement that refuses
// tok-1 (expired), and a Keystone that can be taken down; New has logged
// in once (tok-1).
func keystoneDownPlacement(t *testing.T) (*Client, *fakePlacement, *downKeystone) {
	t.Helper()
	k := &downKeystone{}
	f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
		if k.placementDown.Load() {
			placementError(http.StatusServiceUnavailable, "")(w, r)
			return
		}
		if r.Header.Get("X-Auth-Token") == "tok-1" {
			placementError(http.StatusUnauthorized, "")(w, r)
			return
		}
		dirtyDevice(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })(w, r)
	}}
	ps := startFake(t, f)
	k.k = &fakeKeystone{placementURL: ps.URL}
	ks := httptest.NewServer(k)
	t.Cleanup(ks.Close)
	cfg := unitConfig("")
	cfg.Endpoint, cfg.Token = "", ""
	env := map[string]string{"OS_AUTH_URL": ks.URL + "/v3", "OS_USERNAME": "scour", "OS_PASSWORD": "pw", "OS_PROJECT_NAME": "service"}
	c, err := New(context.Background(), cfg, WithGetenv(func(k string) string { return env[k] }))
	if err != nil {
		t.Fatal(err)
	}
	return c, f, k
}

// Keystone down when the token expires in the middle of a run: the
// un-reserve's re-login gets no answer, so the un-reserve waits for
// Keystone (probing its version document, no login) and, once Keystone
// answers, logs in again and returns the device, re-reading and
// re-verifying it first. Without the wait the un-reserve failed and the
// device waited for the reconciler's next scan.
func TestUnreserveWaitsForKeystone(t *testing.T) {
	t.Parallel()
	c, f, k := keystoneDownPlacement(t)
	put := "PUT /resource_providers/" + unitDev.UUID + "/inventories/"
	k.down.Store(true)
	done := make(chan error, 1)
	go func() { done <- c.Unreserve(context.Background(), unitDev, nil) }()
	testkit.WaitFor(t, 30*time.Second, "the un-reserve probing Keystone twice", func() bool { return k.probes.Load() >= 2 })
	select {
	case err := <-done:
		t.Fatalf("Unreserve ended while Keystone was down: %v; want it to wait for Keystone", err)
	default:
	}
	if n := f.count(put); n != 0 {
		t.Fatalf("%d un-reserve PUTs while scour had no valid token", n)
	}
	reads := f.count("GET /resource_providers/" + unitDev.UUID + "/inventories")
	k.down.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Unreserve once Keystone answers: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Unreserve did not end within a minute of Keystone answering")
	}
	if n := f.count(put); n != 1 {
		t.Errorf("%d un-reserve PUTs, want 1", n)
	}
	if f.count("GET /resource_providers/"+unitDev.UUID+"/inventories") <= reads {
		t.Error("the device was not read again after Keystone came back: the un-reserve must re-verify it")
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	if k.k.issued != 2 {
		t.Errorf("Keystone issued %d tokens, want 2 (the start and one re-login)", k.k.issued)
	}
}

// scourd stopping while an un-reserve waits for Keystone ends the wait
// with a recoverable error (the run's record resumes it) and nothing
// written; Placement down while Keystone answers is no reason to wait.
func TestUnreserveKeystoneWaitEnds(t *testing.T) {
	t.Parallel()
	c, f, k := keystoneDownPlacement(t)
	k.down.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Unreserve(ctx, unitDev, nil) }()
	testkit.WaitFor(t, 30*time.Second, "the un-reserve probing Keystone", func() bool { return k.probes.Load() >= 1 })
	cancel()
	if err := <-done; !IsRecoverable(err) || errors.Is(err, ErrCredentials) {
		t.Errorf("Unreserve cancelled while waiting for Keystone: %v, want a recoverable error that is no credential refusal", err)
	}
	if n := f.count("PUT /resource_providers/"); n != 0 {
		t.Errorf("%d PUTs while scour had no valid token", n)
	}

	// Keystone up, Placement failing: the error comes back at once.
	k.down.Store(false)
	probes := k.probes.Load()
	k.placementDown.Store(true)
	if err := c.Unreserve(context.Background(), unitDev, nil); !IsRecoverable(err) {
		t.Errorf("Unreserve with Placement down: %v, want recoverable", err)
	}
	if k.probes.Load() != probes+1 {
		t.Errorf("%d probes of Keystone, want 1 (it answers: no wait)", k.probes.Load()-probes)
	}
}
