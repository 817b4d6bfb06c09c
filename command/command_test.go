package command

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func valid() *Command {
	return &Command{Version: Version, Kind: KindRelease, Scope: ScopeHost, Host: "compute1",
		InstanceUUID: "178b0921-8f85-4257-88b6-2e743b5a975c", EventType: "instance.delete.end", Format: "versioned",
		Timestamp: time.Date(2026, 11, 22, 2, 59, 51, 0, time.UTC)}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c := valid()
	c.Volume = &VolumeChange{Action: "detach", VolumeID: "v1", IsRoot: true}
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.InstanceUUID != c.InstanceUUID || got.Kind != c.Kind || !got.Timestamp.Equal(c.Timestamp) || got.Volume == nil || !got.Volume.IsRoot {
		t.Errorf("round trip: %+v", got)
	}
}

// Every problem is reported at once, and every one is ErrInvalid (the
// intake poisons invalid commands instead of retrying them).
func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Command)
		want []string
	}{
		{"valid", func(*Command) {}, nil},
		{"future version", func(c *Command) { c.Version = Version + 1 }, []string{"unsupported command version"}},
		{"unknown kind and scope", func(c *Command) { c.Kind, c.Scope = "wipe-everything", "galaxy" },
			[]string{`unknown kind "wipe-everything"`, `unknown scope "galaxy"`}},
		{"host scope without host", func(c *Command) { c.Host = "" }, []string{"host-scoped command without host"}},
		{"broadcast without host", func(c *Command) { c.Scope, c.Host = ScopeBroadcast, "" }, nil},
		{"no instance", func(c *Command) { c.InstanceUUID = "" }, []string{"release command without instance_uuid"}},
		{"reconcile needs no instance", func(c *Command) { c.Kind, c.InstanceUUID = KindReconcile, "" }, nil},
		{"volume without change", func(c *Command) { c.Kind = KindVolume }, []string{"volume command without volume change"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.edit(c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestUnmarshalRejectsGarbage(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "not json", `{"version": 1}`, `[]`} {
		if _, err := Unmarshal([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unmarshal(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

// A batch round-trips in order; one command stays a plain object (what a
// single message, and the poison queue, always showed).
func TestBatchRoundTrip(t *testing.T) {
	t.Parallel()
	var raws [][]byte
	for _, id := range []string{"i-1", "i-2", "i-3"} {
		c := valid()
		c.InstanceUUID = id
		b, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, b)
	}
	one, err := MarshalBatch(raws[:1])
	if err != nil || string(one) != string(raws[0]) {
		t.Fatalf("batch of one = %s, %v; want the command object itself", one, err)
	}
	body, err := MarshalBatch(raws)
	if err != nil {
		t.Fatal(err)
	}
	els, err := UnmarshalBatch(body)
	if err != nil || len(els) != 3 {
		t.Fatalf("UnmarshalBatch: %d elements, %v", len(els), err)
	}
	for i, want := range []string{"i-1", "i-2", "i-3"} {
		if els[i].Err != nil || els[i].Command.InstanceUUID != want || string(els[i].Raw) != string(raws[i]) {
			t.Errorf("element %d: %+v", i, els[i])
		}
	}
	els, err = UnmarshalBatch(one)
	if err != nil || len(els) != 1 || els[0].Command == nil || els[0].Command.InstanceUUID != "i-1" {
		t.Errorf("single command: %+v, %v", els, err)
	}
	if _, err := MarshalBatch(nil); err == nil {
		t.Error("empty batch accepted")
	}
	if _, err := MarshalBatch(make([][]byte, MaxBatch+1)); err == nil {
		t.Error("oversized batch accepted")
	}
}

// One invalid element is reported on its own; the body as a whole is
// rejected only when it is neither a command nor an array of them.
func TestBatchInvalidElements(t *testing.T) {
	t.Parallel()
	good, _ := Marshal(valid())
	els, err := UnmarshalBatch([]byte(` [` + string(good) + `, {"version": 9, "kind": "teleport"}, null, 7]`))
	if err != nil || len(els) != 4 {
		t.Fatalf("%d elements, %v", len(els), err)
	}
	if els[0].Err != nil || els[0].Command == nil {
		t.Errorf("valid element rejected: %v", els[0].Err)
	}
	for i, el := range els[1:] {
		if el.Command != nil || !errors.Is(el.Err, ErrInvalid) {
			t.Errorf("element %d: command %v, err %v; want ErrInvalid", i+1, el.Command, el.Err)
		}
	}
	if !strings.Contains(els[1].Err.Error(), `unknown kind "teleport"`) {
		t.Errorf("element 1 error %q does not say why", els[1].Err)
	}
	for _, body := range []string{`[]`, `[`, `[1,`, strings.Repeat(" ", 3) + "[" + strings.TrimSuffix(strings.Repeat(string(good)+",", MaxBatch+1), ",") + "]"} {
		if _, err := UnmarshalBatch([]byte(body)); !errors.Is(err, ErrInvalid) {
			t.Errorf("body %.40q: err %v, want ErrInvalid", body, err)
		}
	}
	els, err = UnmarshalBatch([]byte(`{"kind": 1}`))
	if err != nil || len(els) != 1 || !errors.Is(els[0].Err, ErrInvalid) {
		t.Errorf("invalid single command: %+v, %v", els, err)
	}
}
