package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// unreservedMeanwhile is a dirty device (generation 7, reserved 1) that
// another actor un-reserves just as scour's PUT arrives: put answers that
// PUT, after the device moved to generation 8 with reserved 0.
// With start 0 it is a device already un-reserved before any PUT.
func unreservedMeanwhile(start int, put http.HandlerFunc) http.HandlerFunc {
	var mu sync.Mutex
	gen, reserved := 7, start
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Method == http.MethodPut {
			gen, reserved = 8, 0
		}
		g, res := gen, reserved
		mu.Unlock()
		if r.Method == http.MethodPut {
			put(w, r)
			return
		}
		readDevice(w, r, g, res)
	}
}

// readDevice answers a read of an unallocated one-time-use device at
// generation gen with reserved res (of 1).
func readDevice(w http.ResponseWriter, r *http.Request, gen, res int) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/inventories"):
		fmt.Fprintf(w, `{"resource_provider_generation": %d, "inventories": {"CUSTOM_PCI_144D_A80A":
 {"total": 1, "reserved": %d, "min_unit": 1, "max_unit": 1, "step_size": 1, "allocation_ratio": 1.0}}}`, gen, res)
	case strings.HasSuffix(r.URL.Path, "/allocations"):
		fmt.Fprintf(w, `{"resource_provider_generation": %d, "allocations": {}}`, gen)
	case strings.HasSuffix(r.URL.Path, "/traits"):
		fmt.Fprintf(w, `{"resource_provider_generation": %d, "traits": ["HW_PCI_ONE_TIME_USE"]}`, gen)
	default:
		http.NotFound(w, r)
	}
}

// A device found at reserved 0 after scour's own PUT was refused with a
// conflict was un-reserved by someone else: ErrUnreservedElsewhere, not
// success. After a PUT whose answer was lost, reserved 0 may be scour's
// own write: success. Either way one PUT only.
func TestUnreserveTellsWhoUnreserved(t *testing.T) {
	t.Parallel()
	conflict := placementError(409, "placement.concurrent_update")
	lost := func(w http.ResponseWriter, r *http.Request) { // the write lands, the answer does not come
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}
	for _, tc := range []struct {
		name string
		put  http.HandlerFunc
		seen bool // UnreserveSeen after a read, as scourd does; else Unreserve
		want error
	}{
		{name: "seen, 409", put: conflict, seen: true, want: ErrUnreservedElsewhere},
		{name: "fresh read, 409", put: conflict, want: ErrUnreservedElsewhere},
		{name: "seen, answer lost", put: lost, seen: true},
		{name: "fresh read, answer lost", put: lost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakePlacement{handle: unreservedMeanwhile(1, tc.put)}
			c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
			if err != nil {
				t.Fatal(err)
			}
			err = unreserveWith(t, c, tc.seen, nil)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("unreserve: %v; want success (the lost PUT may be ours)", err)
			case tc.want != nil && (!errors.Is(err, tc.want) || IsRecoverable(err) || !strings.Contains(err.Error(), "clean-on-delete")):
				t.Fatalf("unreserve: %v; want %v, not recoverable, naming the likely other cleaner", err, tc.want)
			}
			if got := f.count("PUT /resource_providers/"); got != 1 {
				t.Errorf("%d PUTs, want 1", got)
			}
		})
	}
}

// A device already at reserved 0 before any write of this call is
// success when the run's journal holds a PUT that may have landed (a run
// resumed after its un-reserve landed unrecorded), and someone else's
// un-reserve when it holds none: scour never sent one.
func TestUnreserveAlreadyUnreserved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		j    MemJournal
		want error
	}{
		{MemJournal{Gen: 6, Pending: true}, nil},
		{MemJournal{Gen: UnknownPutGeneration, Pending: true}, nil},
		{MemJournal{}, ErrUnreservedElsewhere},
	} {
		t.Run(fmt.Sprint(tc.j), func(t *testing.T) {
			t.Parallel()
			f := &fakePlacement{handle: unreservedMeanwhile(0, nil)}
			c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Unreserve(context.Background(), unitDev, &tc.j); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Unreserve = %v, want %v", err, tc.want)
			}
			if got := f.count("PUT /resource_providers/"); got != 0 {
				t.Errorf("%d PUTs, want 0", got)
			}
		})
	}
}

// An un-reserve PUT that got no answer can land after a re-read still
// showed the device reserved (Placement committed it late); the next PUT,
// at the re-read's generation, then conflicts and the device shows
// reserved 0. That is scour's own write, not someone else's: success.
func TestUnreserveLateLandingIsOurs(t *testing.T) {
	t.Parallel()
	for _, seen := range []bool{false, true} {
		t.Run(fmt.Sprintf("seen=%v", seen), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			gen, reserved, puts, landing := 7, 1, 0, false
			f := &fakePlacement{handle: func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if r.Method == http.MethodPut {
					puts++
					if landing { // the first PUT commits now, just before the second
						gen, reserved, landing = gen+1, 0, false
					}
					if puts == 1 {
						landing = true
						w.WriteHeader(http.StatusServiceUnavailable) // no definite answer
						return
					}
					placementError(409, "placement.concurrent_update")(w, r)
					return
				}
				readDevice(w, r, gen, reserved)
			}}
			c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
			if err != nil {
				t.Fatal(err)
			}
			err = unreserveWith(t, c, seen, nil)
			if err != nil {
				t.Fatalf("unreserve: %v; want success (the unanswered PUT landed late: ours)", err)
			}
			if got := f.count("PUT /resource_providers/"); got != 2 {
				t.Errorf("%d PUTs, want 2 (one unanswered, one conflicting)", got)
			}
		})
	}
}
