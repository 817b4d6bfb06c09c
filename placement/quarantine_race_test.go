package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// raceDevice is one free device of a fake Placement that checks the
// generation of every write as Placement does (a PUT at another
// generation is a 409; an accepted one moves the provider on by one).
// The first inventory PUT that lowers reserved (a run's un-reserve) is
// held in flight: sent is closed when it arrives, and it lands (or
// conflicts) only once land is closed; landed is closed after.
// beforeTraitRead and beforeTraitWrite, when set, run as each traits GET
// or PUT arrives, before it is answered.
type raceDevice struct {
	mu       sync.Mutex
	gen, res int
	traits   []string

	sent, land, landed chan struct{}
	holding            bool
	beforeTraitRead    func()
	beforeTraitWrite   func()
}

func newRaceDevice(gen int) *raceDevice {
	return &raceDevice{gen: gen, res: 1, traits: []string{"COMPUTE_MANAGED_PCI_DEVICE", DefaultOneTimeUseTrait},
		sent: make(chan struct{}), land: make(chan struct{}), landed: make(chan struct{})}
}

func (d *raceDevice) handle(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Gen      int      `json:"resource_provider_generation"`
		Reserved *int     `json:"reserved"`
		Traits   []string `json:"traits"`
	}
	if r.Method == http.MethodPut {
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	held := false
	switch {
	case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/inventories/"):
		d.mu.Lock()
		if body.Reserved != nil && *body.Reserved < d.res && !d.holding {
			d.holding, held = true, true
		}
		d.mu.Unlock()
		if held {
			close(d.sent)
			<-d.land
			defer close(d.landed)
		}
	case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/traits"):
		if d.beforeTraitWrite != nil {
			d.beforeTraitWrite()
		}
	case strings.HasSuffix(r.URL.Path, "/traits"):
		if d.beforeTraitRead != nil {
			d.beforeTraitRead()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case r.Method == http.MethodPut && body.Gen != d.gen:
		placementError(409, "placement.concurrent_update")(w, r)
	case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/inventories/"):
		d.gen, d.res = d.gen+1, *body.Reserved
		fmt.Fprintf(w, `{"resource_provider_generation": %d, "total": 1, "reserved": %d}`, d.gen, d.res)
	case r.Method == http.MethodPut:
		d.gen, d.traits = d.gen+1, body.Traits
		fmt.Fprintf(w, `{"resource_provider_generation": %d, "traits": []}`, d.gen)
	case strings.HasSuffix(r.URL.Path, "/traits"):
		b, _ := json.Marshal(d.traits)
		fmt.Fprintf(w, `{"resource_provider_generation": %d, "traits": %s}`, d.gen, b)
	default:
		readDevice(w, r, d.gen, d.res)
	}
}

// fenced says whether the device is reserved = total and quarantined.
func (d *raceDevice) fenced() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.res == 1 && slices.Contains(d.traits, DefaultQuarantineTrait),
		fmt.Sprintf("reserved %d/1, traits %v, generation %d", d.res, d.traits, d.gen)
}

// Review rev5 F1: a retirement (or a scan's re-quarantine) meets a run's
// un-reserve PUT in flight: journaled and sent at generation 7, not
// landed. Quarantine read reserved 1/1 and wrote nothing; its trait
// write then met the landed PUT (409) and its retry re-read only the
// traits: nil, with the device at reserved 0 and the trait, schedulable.
// Quarantine now returns nil only once Placement showed reserved = total
// and the trait at one generation, whichever write lands first, also
// when the PUT lands between its inventory and its traits read.
func TestQuarantineMeetsAnUnreserveInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		putLandsFirst bool  // the run's PUT lands just before the trait write
		betweenReads  bool  // the run's PUT lands just before the traits read
		unreserve     error // what the run's un-reserve then returns
	}{
		{name: "un-reserve lands first", putLandsFirst: true},
		{name: "un-reserve lands between the reads", betweenReads: true},
		{name: "trait lands first", unreserve: ErrQuarantined},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newRaceDevice(7)
			var once sync.Once
			landNow := func() { once.Do(func() { close(d.land); <-d.landed }) }
			url := startFake(t, &fakePlacement{handle: d.handle}).URL
			run, err := New(context.Background(), unitConfig(url))
			if err != nil {
				t.Fatal(err)
			}
			op, err := New(context.Background(), unitConfig(url))
			if err != nil {
				t.Fatal(err)
			}
			seen, err := run.Device(context.Background(), unitDev)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.putLandsFirst:
				d.beforeTraitWrite = landNow
			case tc.betweenReads:
				d.beforeTraitRead = landNow
			}
			done := make(chan error, 1)
			go func() {
				done <- run.UnreserveSeen(context.Background(), seen, &MemJournal{Clear: 7, ClearKnown: true})
			}()
			<-d.sent // journaled and sent, not landed
			if err := op.Quarantine(context.Background(), unitDev, "retired by op: RMA"); err != nil {
				t.Fatalf("Quarantine: %v", err)
			}
			if ok, now := d.fenced(); !ok && tc.unreserve == nil {
				t.Errorf("Quarantine returned nil with the device at %s: a retired device is schedulable", now)
			}
			landNow()
			if err := <-done; tc.unreserve == nil && err != nil || !errors.Is(err, tc.unreserve) {
				t.Errorf("the run's un-reserve = %v, want %v", err, tc.unreserve)
			}
			if ok, now := d.fenced(); !ok {
				t.Errorf("device at %s after both; want reserved 1/1 and quarantined", now)
			}
		})
	}
}

// TestE2EQuarantineMeetsAnUnreserveInFlight is TestQuarantineMeetsAnUnreserveInFlight
// against the real Placement: the run's PUT is held in the client after
// it was journaled; the retirement's Quarantine goes through a proxy
// that, at its first trait write, lets that PUT land first.
func TestE2EQuarantineMeetsAnUnreserveInFlight(t *testing.T) {
	env := testPlacement(t)
	h := seedNode(t, env)
	dev := h.seedDevice(devSpec{Addr: "0000:81:00.0", Reserved: 1})
	run := newE2EClient(t, env, h.Node)
	sent, land, landed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	run.beforeInventoryWrite = func(context.Context, string) { close(sent); <-land }

	u, err := url.Parse(env.Backend)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	var once sync.Once
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/resource_providers/"+dev.UUID+"/traits") {
			once.Do(func() { close(land); <-landed })
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	op := newE2EClient(t, testEnv{URL: proxy.URL, Backend: env.Backend, Token: env.Token}, h.Node)

	ctx := context.Background()
	seen, err := run.Device(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	j := &MemJournal{Clear: seen.Generation, ClearKnown: true}
	done := make(chan error, 1)
	go func() { done <- run.UnreserveSeen(ctx, seen, j); close(landed) }()
	<-sent
	if err := op.Quarantine(ctx, dev, "retired by op: RMA"); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the run's un-reserve: %v (its PUT was to land first)", err)
	}
	if !j.Pending {
		t.Fatal("the run's PUT was not journaled")
	}
	if n := h.reserved(dev); n != 1 || !slices.Contains(h.traits(dev), DefaultQuarantineTrait) {
		t.Errorf("Quarantine returned nil with the device at reserved %d/1, traits %v: a retired device is schedulable", n, h.traits(dev))
	}
}
