package command

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func fastSeeds(f *testing.F) {
	c := valid()
	c.MessageID, c.RequestID, c.Node = "m-1", "req-1", "node-1"
	c.Volumes = []string{"v1", "v2"}
	one, _ := Marshal(c)
	c.Volume = &VolumeChange{Action: "swap", OldVolumeID: "a", NewVolumeID: "b", IsRoot: true}
	two, _ := Marshal(c)
	batch, _ := MarshalBatch([][]byte{one, two})
	for _, s := range []string{
		string(one), string(two), string(batch), " " + string(batch) + "\n",
		`[` + string(one) + `, {"version": 2}]`,
		`{"version":1,"kind":"release","kind":"claim"}`,
		`{"Version":1}`, `{"version":01}`, `{"version":1.0}`, `{"version":-1}`,
		`{"host":"a\"b"}`, `{"host":"\u00e9"}`, `{"volumes":null}`, `{"volumes":[]}`,
		`{"volume":{"is_root":true,"is_root":false}}`, `{"timestamp":"2026-11-22T02:59:51Z"}`,
		`{"timestamp":"2026-11-22 02:59:51"}`, `[]`, `[1]`, `{} x`, `null`,
	} {
		f.Add([]byte(s))
	}
}

// Whenever the fast path answers, encoding/json gives the same elements.
func FuzzFastDecode(f *testing.F) {
	fastSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := fastBatch(b)
		if !ok {
			return
		}
		slow, err := slowBatch(b)
		if err != nil {
			t.Fatalf("fast path decoded %q, slow path: %v", b, err)
		}
		if len(fast) != len(slow) {
			t.Fatalf("%q: fast %d elements, slow %d", b, len(fast), len(slow))
		}
		for i := range fast {
			if !reflect.DeepEqual(fast[i].Command, slow[i].Command) || string(fast[i].Raw) != string(slow[i].Raw) ||
				fmt.Sprint(fast[i].Err) != fmt.Sprint(slow[i].Err) {
				t.Fatalf("%q element %d:\nfast %+v %q %v\nslow %+v %q %v", b, i,
					fast[i].Command, fast[i].Raw, fast[i].Err, slow[i].Command, slow[i].Raw, slow[i].Err)
			}
		}
	})
}

// What Marshal writes takes the fast path (else it is dead code).
func TestFastPathTakesMarshalOutput(t *testing.T) {
	c := valid()
	c.Volumes = []string{"v1"}
	c.Volume = &VolumeChange{Action: "attach", VolumeID: "v1"}
	one, _ := Marshal(c)
	batch, _ := MarshalBatch([][]byte{one, one, one})
	for _, b := range [][]byte{one, batch} {
		els, ok := fastBatch(b)
		if !ok || els[0].Command == nil || els[0].Command.Volume == nil || els[0].Command.Volumes[0] != "v1" {
			t.Errorf("fast path refused or garbled %s: %+v", b, els)
		}
	}
}

func BenchmarkUnmarshalBatch(b *testing.B) {
	c := valid()
	c.MessageID, c.RequestID, c.ProjectID, c.UserID = "0b8ec8ba-2f1a-4f3c-9a35-c9a1d4b1f0aa", "req-5b6c791d-f2d7-4a1f-8d5c-b1c1f3e7a100", "6f70656e737461636b20342065766572", "fake"
	one, _ := Marshal(c)
	raws := make([][]byte, 16)
	for i := range raws {
		raws[i] = one
	}
	body, _ := MarshalBatch(raws)
	for _, bc := range []struct {
		name string
		fn   func([]byte) ([]Element, error)
	}{{"fast", UnmarshalBatch}, {"encoding-json", slowBatch}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.fn(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Whenever the fast encoder answers, it writes what encoding/json writes;
// it answers for what the dispatcher makes (else it is dead code).
func FuzzFastEncode(f *testing.F) {
	f.Add(1, "release", "host", "compute-1", "", "0b3ea4f8-6bd8-4c4a-9f4f-0e3b1fbd2d07", "versioned",
		"req-1", int64(1795402791), int64(390927000), 0, "v1", "attach", "v1", "", true)
	f.Add(1, "volume", "broadcast", "", "node-1", "i-1", "legacy", "", int64(0), int64(0), 3600, "", "swap", "", "b", false)
	f.Add(-7, "claim", "host", "a<b", "é", "\x00", "x\"y", `a\b`, int64(-1), int64(5), -90, "v&w", "", "", "", false)
	f.Add(1, "claim", "host", "h", "", "i", "versioned", "", int64(253402300800), int64(0), 45, "", "", "", "", false)
	f.Add(1, "claim", "host", "h", "", "i", "versioned", "", int64(-62167219201), int64(0), 0, "", "", "", "", false)
	f.Add(1, "claim", "host", "h", "", "i", "versioned", "", int64(0), int64(0), 24*3600, "", "", "", "", false)
	f.Fuzz(func(t *testing.T, version int, kind, scope, host, node, instance, format, req string,
		sec, nsec int64, offset int, volume, action, volID, newVol string, root bool) {
		c := &Command{Version: version, Kind: Kind(kind), Scope: Scope(scope), Host: host, Node: node,
			InstanceUUID: instance, ProjectID: host + "-p", UserID: node, State: format, EventType: kind + ".end",
			Format: format, MessageID: req, RequestID: req,
			Timestamp: time.Unix(sec, nsec%1e9).In(time.FixedZone("z", offset)),
		}
		if volume != "" {
			c.Volumes = []string{volume, host}
		}
		if action != "" {
			c.Volume = &VolumeChange{Action: action, VolumeID: volID, NewVolumeID: newVol, IsRoot: root}
		}
		want, werr := json.Marshal(c)
		got, gerr := Marshal(c)
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || string(got) != string(want) {
			t.Fatalf("Marshal = %s, %v\nencoding/json = %s, %v", got, gerr, want, werr)
		}
	})
}

func TestFastEncoderTakesDispatcherCommands(t *testing.T) {
	c := valid()
	c.MessageID, c.RequestID, c.Node = "m-1", "req-1", "node-1"
	c.Volumes = []string{"v1", "v2"}
	c.Volume = &VolumeChange{Action: "swap", OldVolumeID: "a", NewVolumeID: "b", IsRoot: true}
	c.Timestamp = time.Date(2026, 11, 22, 2, 59, 51, 390927000, time.UTC)
	got, ok := appendCommand(nil, c)
	want, _ := json.Marshal(c)
	if !ok || string(got) != string(want) {
		t.Fatalf("fast encoder: %s, %v; encoding/json: %s", got, ok, want)
	}
	c.Host = "compute<1>" // HTML-escaped by encoding/json: not plain
	if _, ok := appendCommand(nil, c); ok {
		t.Fatal("fast encoder took a string encoding/json escapes")
	}
}

func BenchmarkMarshal(b *testing.B) {
	c := valid()
	c.MessageID, c.RequestID, c.ProjectID, c.UserID = "0b8ec8ba-2f1a-4f3c-9a35-c9a1d4b1f0aa", "req-5b6c791d-f2d7-4a1f-8d5c-b1c1f3e7a100", "6f70656e737461636b20342065766572", "fake"
	c.Timestamp = time.Date(2026, 11, 22, 2, 59, 51, 390927000, time.UTC)
	for _, bc := range []struct {
		name string
		fn   func(*Command) ([]byte, error)
	}{{"fast", Marshal}, {"encoding-json", func(c *Command) ([]byte, error) { return json.Marshal(c) }}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.fn(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
