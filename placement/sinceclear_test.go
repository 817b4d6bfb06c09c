package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// Review rev3 H1, layer 2: a run's un-reserve PUT lands only at the
// generation of the all-clear its destructive steps started on (7 here).
// The device found reserved at another generation (someone lifted the
// fence, a tenant came, Nova burned it) is ErrStaleReturn with no PUT,
// and a 409 on the PUT at 7 is not re-verified and PUT again. The one
// move scour can prove its own is its journaled PUT: reserved 0 at 8.
func TestUnreserveOnlyAtTheAllClear(t *testing.T) {
	t.Parallel()
	conflict := placementError(409, "placement.concurrent_update")
	for _, tc := range []struct {
		name     string
		now, res int  // the device when read
		pending  bool // a PUT of the run at 7 may have landed
		moved    bool // the first PUT meets a write by someone else: 409, the device at 9, reserved
		want     error
		puts     int
	}{
		{name: "nothing moved", now: 7, res: 1, puts: 1},
		{name: "fence lifted, tenant, burn", now: 9, res: 1, want: ErrStaleReturn},
		{name: "written during the PUT", now: 7, res: 1, moved: true, want: ErrStaleReturn, puts: 1},
		{name: "un-reserved by someone else", now: 8, res: 0, want: ErrUnreservedElsewhere},
		{name: "our own PUT landed", now: 8, res: 0, pending: true},
		{name: "our PUT did not land, someone wrote", now: 8, res: 1, pending: true, want: ErrStaleReturn},
	} {
		for _, seen := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s seen=%v", tc.name, seen), func(t *testing.T) {
				t.Parallel()
				j := &MemJournal{Gen: 7, Pending: tc.pending, Clear: 7, ClearKnown: true}
				d := &journalDevice{gen: tc.now, res: tc.res, j: j}
				if tc.moved {
					d.answer = func(w http.ResponseWriter, r *http.Request) {
						d.answer = nil
						d.gen += 2
						conflict(w, r)
					}
				}
				f := &fakePlacement{handle: d.handle}
				c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
				if err != nil {
					t.Fatal(err)
				}
				err = unreserveWith(t, c, seen, j)
				if tc.want == nil && err != nil || !errors.Is(err, tc.want) {
					t.Fatalf("Unreserve = %v, want %v", err, tc.want)
				}
				if got := f.count("PUT /resource_providers/"); got != tc.puts {
					t.Errorf("%d PUTs, want %d", got, tc.puts)
				}
				if tc.want != nil && d.res != tc.res && !tc.moved {
					t.Errorf("reserved %d after a refusal, want %d", d.res, tc.res)
				}
			})
		}
	}
}

// The ordinary path stays at one request after the read: the PUT at the
// all-clear's generation.
func TestUnreserveSeenAtTheAllClearIsOnePut(t *testing.T) {
	t.Parallel()
	j := &MemJournal{Clear: 7, ClearKnown: true}
	d := &journalDevice{gen: 7, res: 1, j: j}
	f := &fakePlacement{handle: d.handle}
	c, err := New(context.Background(), unitConfig(startFake(t, f).URL))
	if err != nil {
		t.Fatal(err)
	}
	seen, err := c.Device(context.Background(), unitDev)
	if err != nil {
		t.Fatal(err)
	}
	before := f.count("")
	if err := c.UnreserveSeen(context.Background(), seen, j); err != nil {
		t.Fatal(err)
	}
	if got := f.count("") - before; got != 1 {
		t.Errorf("%d requests after the read, want 1 (the PUT)", got)
	}
}
