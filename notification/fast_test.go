package notification

import (
	"encoding/json"
	"os"
	"path/filepath"
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
	for _, q := range []string{`"plain"`, `"caf\u00e9 \ud83d\ude00 \ud800 x \udc00 \n\t\"\\\/"`, `"é\u0000"`, `"\ud83d\u0041"`, `"\ud83d"`} {
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
