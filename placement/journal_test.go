package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// journalDevice is a reserved, free device at generation gen whose PUTs
// get answer (nil: 200, and the device moves to gen+1 with reserved 0).
type journalDevice struct {
	mu       sync.Mutex
	gen, res int
	answer   http.HandlerFunc
	j        *MemJournal
	// journaled is the journal's state as each PUT arrived.
	journaled []MemJournal
}

func (d *journalDevice) handle(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.Method != http.MethodPut {
		readDevice(w, r, d.gen, d.res)
		return
	}
	d.journaled = append(d.journaled, *d.j)
	if d.answer != nil {
		d.answer(w, r)
		return
	}
	d.gen, d.res = d.gen+1, 0
	fmt.Fprintf(w, `{"resource_provider_generation": %d, "total": 1, "reserved": 0}`, d.gen)
}

// A run's earlier PUT at generation 7 may have landed (scourd stopped
// before recording the answer). Found reserved at 7 or 8, the device was
// never schedulable since, and the un-reserve goes on; found reserved at
// 9 or beyond (or after a PUT at an unrecorded generation), it may have
// served a tenant since: ErrStaleReturn, no PUT, still reserved.
func TestUnreserveAfterAPendingPut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		was, now int
		stale    bool
	}{
		{was: 7, now: 7},
		{was: 7, now: 8},
		{was: 7, now: 9, stale: true},
		{was: 7, now: 12, stale: true},
		{was: UnknownPutGeneration, now: 3, stale: true},
	} {
		for _, seen := range []bool{false, true} {
			t.Run(fmt.Sprintf("put at %d, now %d, seen=%v", tc.was, tc.now, seen), func(t *testing.T) {
				t.Parallel()
				j := &MemJournal{Gen: tc.was, Pending: true}
				d := &journalDevice{gen: tc.now, res: 1, j: j}
				f := &fakePlacement{handle: d.handle}
				c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
				if err != nil {
					t.Fatal(err)
				}
				err = unreserveWith(t, c, seen, j)
				puts := f.count("PUT /resource_providers/")
				if tc.stale {
					if !errors.Is(err, ErrStaleReturn) || IsRecoverable(err) {
						t.Fatalf("Unreserve = %v, want ErrStaleReturn (not retried)", err)
					}
					if puts != 0 || d.res != 1 {
						t.Errorf("%d PUTs, reserved %d; want none, still reserved", puts, d.res)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if puts != 1 || d.res != 0 {
					t.Errorf("%d PUTs, reserved %d; want one, returned", puts, d.res)
				}
				if want := (MemJournal{Gen: tc.now, Pending: true}); d.journaled[0] != want {
					t.Errorf("journal when the PUT was sent = %+v, want %+v", d.journaled[0], want)
				}
			})
		}
	}
}

// Every PUT is journaled before it is sent; one refused with a conflict
// can never land, and is cleared, so a later call does not take a device
// changed since for a stale return.
func TestUnreserveJournalsEachPut(t *testing.T) {
	t.Parallel()
	for _, seen := range []bool{false, true} {
		t.Run(fmt.Sprint("seen=", seen), func(t *testing.T) {
			t.Parallel()
			j := &MemJournal{}
			d := &journalDevice{gen: 7, res: 1, j: j}
			conflict := placementError(409, "placement.concurrent_update")
			d.answer = func(w http.ResponseWriter, r *http.Request) {
				d.answer = nil // the next PUT lands
				d.gen += 3     // an agent rewrote traits meanwhile
				conflict(w, r)
			}
			f := &fakePlacement{handle: d.handle}
			c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
			if err != nil {
				t.Fatal(err)
			}
			if err := unreserveWith(t, c, seen, j); err != nil {
				t.Fatalf("Unreserve = %v; a conflicting PUT cannot have landed, so generation 10 is no stale return", err)
			}
			want := []MemJournal{{Gen: 7, Pending: true}, {Gen: 10, Pending: true}}
			if len(d.journaled) != 2 || d.journaled[0] != want[0] || d.journaled[1] != want[1] {
				t.Errorf("journal as each PUT arrived = %+v, want %+v", d.journaled, want)
			}
		})
	}
}

// A PUT that got no answer may land; a re-read that then shows the
// device reserved two generations on cannot tell whether it landed and a
// tenant came and went: ErrStaleReturn.
func TestUnreserveUnansweredThenMovedIsStale(t *testing.T) {
	t.Parallel()
	j := &MemJournal{}
	d := &journalDevice{gen: 7, res: 1, j: j}
	d.answer = func(w http.ResponseWriter, r *http.Request) {
		d.gen += 2 // landed, then a tenant's allocation and Nova's burn
		d.res = 1
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	f := &fakePlacement{handle: d.handle}
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unreserve(context.Background(), unitDev, j); !errors.Is(err, ErrStaleReturn) {
		t.Fatalf("Unreserve = %v, want ErrStaleReturn", err)
	}
	if got := f.count("PUT /resource_providers/"); got != 1 {
		t.Errorf("%d PUTs, want 1", got)
	}
}

// failingJournal cannot store anything.
type failingJournal struct{ MemJournal }

func (failingJournal) NotePut(context.Context, int) error { return errors.New("database is locked") }

// A PUT the journal could not record is not sent: after a crash it could
// not be told from a PUT never sent.
func TestUnreserveWithoutJournalSendsNothing(t *testing.T) {
	t.Parallel()
	for _, seen := range []bool{false, true} {
		t.Run(fmt.Sprint("seen=", seen), func(t *testing.T) {
			t.Parallel()
			j := &failingJournal{}
			d := &journalDevice{gen: 7, res: 1, j: &j.MemJournal}
			f := &fakePlacement{handle: d.handle}
			c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
			if err != nil {
				t.Fatal(err)
			}
			if err := unreserveWith(t, c, seen, j); err == nil {
				t.Fatal("Unreserve succeeded without recording its PUT")
			}
			if got := f.count("PUT /resource_providers/"); got != 0 || d.res != 1 {
				t.Errorf("%d PUTs, reserved %d; want none, still reserved", got, d.res)
			}
		})
	}
}

// unreserveWith un-reserves unitDev as scourd does after a read
// (UnreserveSeen on what Device saw) when seen, else with Unreserve.
func unreserveWith(t *testing.T, c *Client, seen bool, j PutJournal) error {
	t.Helper()
	if !seen {
		return c.Unreserve(context.Background(), unitDev, j)
	}
	d, err := c.Device(context.Background(), unitDev)
	if err != nil {
		t.Fatal(err)
	}
	return c.UnreserveSeen(context.Background(), d, j)
}
