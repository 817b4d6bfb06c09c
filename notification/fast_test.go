package notification

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every fixture takes the fast path and decodes exactly as encoding/json.
func TestFastPathMatchesSlowOnFixtures(t *testing.T) {
	t.Parallel()
	for name := range sampleWants {
		body := wireMessage(t, filepath.Join("testdata", name))
		raw, _ := os.ReadFile(filepath.Join("testdata", name))
		for _, b := range [][]byte{body, raw} { // enveloped and bare
			fast, ok := Decoder{}.fast(b)
			if !ok {
				t.Errorf("%s: fast path gave up on a well-formed message", name)
				continue
			}
			slow, err := Decoder{}.slow(b)
			if err != nil {
				t.Fatalf("%s: slow: %v", name, err)
			}
			if d := cmp.Diff(slow, fast); d != "" {
				t.Errorf("%s (-slow +fast):\n%s", name, d)
			}
		}
	}
}

func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	qs := []string{`"plain"`, `"caf\u00e9 \ud83d\ude00 \ud800 x \udc00 \n\t\"\\\/"`, `"é\u0000"`, `"\ud83d\u0041"`, `"\ud83d"`}
	// Long strings of runs and escapes, so that words straddle them in
	// every alignment.
	pieces := []string{"a", "bcdefghij", `\"`, `\\`, `\/`, `\n`, `\u00e9`, `\ud83d\ude00`, `\udc00`, "é", "\xff", "\xe2\x82"}
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		var b strings.Builder
		b.WriteByte('"')
		for range rnd.IntN(24) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		b.WriteByte('"')
		qs = append(qs, b.String())
	}
	for _, q := range qs {
		var want string
		if err := json.Unmarshal([]byte(q), &want); err != nil {
			t.Fatal(err)
		}
		if got := unquote([]byte(q)); got != want {
			t.Errorf("unquote(%s) = %q, want %q", q, got, want)
		}
	}
}

// FuzzFastPath: the scanner accepts exactly what encoding/json accepts, and
// whenever the fast path decodes, the encoding/json path agrees exactly.
func FuzzFastPath(f *testing.F) {
	for _, name := range []string{"versioned/instance-volume_swap-end.json", "legacy/compute.instance.shelve_offload.end.json", "versioned/instance-update.json"} {
		raw, _ := os.ReadFile(filepath.Join("testdata", name))
		f.Add(raw)
		body, _ := EncodeOslo(raw)
		f.Add(body)
	}
	f.Add([]byte(`{"event_type": "instance.delete.end", "payload": {"nova_object.data": {"uuid": "u", "host": null, "block_devices": [null, {"nova_object.data": {"boot_index": 0}}]}}}`))
	f.Add([]byte(`{"Event_Type": "instance.delete.end", "event_type": "x", "payload": {"uuid": "\u0041"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s := scanner{b: body}
		scanOK := s.value()
		s.ws()
		if (scanOK && s.i == len(body)) != json.Valid(body) {
			t.Fatalf("scanner validity %v != json.Valid %v for %q", scanOK && s.i == len(body), json.Valid(body), body)
		}
		fast, ok := Decoder{}.fast(body)
		if !ok {
			return
		}
		slow, err := Decoder{}.slow(body)
		if err != nil {
			t.Fatalf("fast decoded %+v but slow failed: %v", fast, err)
		}
		if d := cmp.Diff(slow, fast); d != "" {
			t.Fatalf("(-slow +fast):\n%s", d)
		}
	})
}

// skipPlain's word-at-a-time test finds the same first stop as a byte loop,
// for every byte value at every place in a word, after any other bytes.
func TestSkipPlainMatchesByteLoop(t *testing.T) {
	t.Parallel()
	isStop := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	b := make([]byte, 16)
	for before := 0; before < 256; before++ {
		for c := 0; c < 256; c++ {
			for at := 0; at < 8; at++ {
				for j := range b {
					b[j] = byte(before) // what follows the stop (borrows must not matter)
				}
				for j := 0; j < at; j++ {
					if isStop(byte(before)) {
						b[j] = 'x'
					}
				}
				b[at] = byte(c)
				want := len(b)
				for j, c := range b {
					if isStop(c) {
						want = j
						break
					}
				}
				if got := skipPlain(b, 0); got != want {
					t.Fatalf("skipPlain(%q) = %d, want %d", b, got, want)
				}
			}
		}
	}
}

// Events own their strings: the pooled buffer oslo.message is decoded into
// is reused by the next Decode without changing an earlier Event.
func TestEventsDoNotShareDecodeBuffers(t *testing.T) {
	t.Parallel()
	first := wireMessage(t, "testdata/versioned/instance-delete-end.json")
	want, err := Decode(first)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := Decode(first)
	for _, name := range []string{"versioned/instance-update.json", "legacy/compute.instance.delete.end.json", "versioned/instance-volume_swap-end.json"} {
		if _, err := Decode(wireMessage(t, filepath.Join("testdata", name))); err != nil {
			t.Fatal(err)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("an earlier Event changed (-want +got):\n%s", d)
	}
}

// The fast path's string fields are made at the end of the scan from a
// pooled arena: an Event must not change when later decodes reuse it, and
// fields read after the scan (a payload ahead of its event type) and
// fields with escapes must come out as encoding/json's.
func TestFastPathStringsSurviveLaterDecodes(t *testing.T) {
	payloadFirst := []byte(`{"payload": {"nova_object.data": {"uuid": "u-1", "host": "h\u00e9st", "node": null,` +
		` "state": "del\"eted", "tenant_id": "t", "user_id": "u"}, "nova_object.name": "InstanceActionPayload"},` +
		` "event_type": "instance.delete.end", "publisher_id": "nova-compute:h\u00e9st", "priority": "INFO",` +
		` "message_id": "m-1", "timestamp": "2026-11-22 02:59:51.390927", "_context_request_id": "req-1"}`)
	others := [][]byte{payloadFirst}
	for name := range sampleWants {
		others = append(others, wireMessage(t, filepath.Join("testdata", name)))
	}
	for _, body := range others {
		first, ok := Decoder{}.fast(body)
		if !ok {
			t.Fatalf("fast path gave up on %.80s", body)
		}
		want, err := Decoder{}.slow(body)
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range others { // reuse the pooled arenas and buffers
			if _, ok := (Decoder{}).fast(other); !ok {
				t.Fatalf("fast path gave up on %.80s", other)
			}
		}
		if d := cmp.Diff(want, first); d != "" {
			t.Errorf("%.80s: event changed by later decodes or differs from encoding/json (-slow +fast):\n%s", body, d)
		}
	}
}
