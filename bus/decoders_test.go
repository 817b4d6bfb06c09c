package bus

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/scour-project/scour/notification"
)

func wire(tb testing.TB, name string) []byte {
	tb.Helper()
	raw, err := os.ReadFile("../notification/testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	body, err := notification.EncodeOslo(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// The pool gives each caller its own result, concurrently.
func TestDecodersGiveEachCallerItsEvent(t *testing.T) {
	d := newDecoders(notification.Decoder{}, 2)
	bodies := map[string][]byte{
		"instance.delete.end": wire(t, "versioned/instance-delete-end.json"),
		"instance.update":     wire(t, "versioned/instance-update.json"),
	}
	var wg sync.WaitGroup
	for range 20 {
		for want, body := range bodies {
			wg.Go(func() {
				ev, err := d.Decode(body)
				if err != nil || ev.EventType != want {
					t.Errorf("got %v, %v; want %s", ev, err, want)
				}
			})
		}
	}
	wg.Go(func() {
		if _, err := d.Decode([]byte("not json")); err == nil {
			t.Error("garbage decoded without error")
		}
	})
	wg.Wait()
	d.Close()
	if _, err := d.Decode(bodies["instance.update"]); !errors.Is(err, errDecodersStopped) {
		t.Errorf("Decode after Close: %v, want errDecodersStopped", err)
	}
}

// BenchmarkDecodeGoroutine compares decoding on a fresh goroutine per
// message (what the router's handler goroutine did) with handing it to
// the pool.
func BenchmarkDecodeGoroutine(b *testing.B) {
	body := wire(b, "versioned/instance-delete-end.json")
	dec := notification.Decoder{}
	b.Run("fresh-goroutine", func(b *testing.B) {
		for b.Loop() {
			done := make(chan struct{})
			go func() { _, _ = dec.Decode(body); close(done) }()
			<-done
		}
	})
	b.Run("pool", func(b *testing.B) {
		d := newDecoders(dec, 2)
		defer d.Close()
		for b.Loop() {
			done := make(chan struct{})
			go func() { _, _ = d.Decode(body); close(done) }()
			<-done
		}
	})
}
