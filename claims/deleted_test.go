package claims

import (
	"context"
	"testing"
	"time"
)

// A handled delete is remembered across a restart (rule 5), per host,
// idempotently, and forgotten after DeletedRetention by the next write.
func TestNoteDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now))
		for range 2 {
			if err := s.NoteDeleted(ctx, "h1", "vm-1", "msg-1"); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		s = mustOpen(t, cfg, WithClock(clock.Now)) // restarted
		for _, c := range []struct {
			host, vm string
			want     bool
		}{{"h1", "vm-1", true}, {"h2", "vm-1", false}, {"h1", "vm-2", false}} {
			if got, err := s.Deleted(ctx, c.host, c.vm); err != nil || got != c.want {
				t.Errorf("Deleted(%s, %s) = %v, %v; want %v", c.host, c.vm, got, err, c.want)
			}
		}
		clock.Advance(DeletedRetention + time.Minute)
		if err := s.NoteDeleted(ctx, "h1", "vm-2", "msg-2"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Deleted(ctx, "h1", "vm-1"); got {
			t.Error("a tombstone older than DeletedRetention survived the next write")
		}
		if got, _ := s.Deleted(ctx, "h1", "vm-2"); !got {
			t.Error("the new tombstone is missing")
		}
	})
}
