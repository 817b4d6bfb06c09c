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
	c.Volume = &VolumeChange{Action: "detach", VolumeID: "a07f71dc-8151-4e7d-a0cc-cd24a3f11113", IsRoot: true}
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

// The rolling-upgrade array form (what batching dispatchers sent) decodes
// into its commands in order; a single command is one element.
func TestDecodeArrayForm(t *testing.T) {
	t.Parallel()
	ids := []string{"178b0921-8f85-4257-88b6-2e743b5a9751", "178b0921-8f85-4257-88b6-2e743b5a9752", "178b0921-8f85-4257-88b6-2e743b5a9753"}
	var raws []string
	for _, id := range ids {
		c := valid()
		c.InstanceUUID = id
		b, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, string(b))
	}
	els, err := Decode([]byte("[" + strings.Join(raws, ",") + "]"))
	if err != nil || len(els) != 3 {
		t.Fatalf("Decode: %d elements, %v", len(els), err)
	}
	for i, want := range ids {
		if els[i].Err != nil || els[i].Command.InstanceUUID != want || string(els[i].Raw) != raws[i] {
			t.Errorf("element %d: %+v", i, els[i])
		}
	}
	els, err = Decode([]byte(raws[0]))
	if err != nil || len(els) != 1 || els[0].Command == nil || els[0].Command.InstanceUUID != ids[0] {
		t.Errorf("single command: %+v, %v", els, err)
	}
}

// One invalid element is reported on its own; the body as a whole is
// rejected only when it is neither a command nor an array of them.
func TestDecodeInvalidElements(t *testing.T) {
	t.Parallel()
	good, _ := Marshal(valid())
	els, err := Decode([]byte(` [` + string(good) + `, {"version": 9, "kind": "teleport"}, null, 7]`))
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
	for _, body := range []string{`[]`, `[`, `[1,`, strings.Repeat(" ", 3) + "[" + strings.TrimSuffix(strings.Repeat(string(good)+",", MaxArray+1), ",") + "]",
		"[" + strings.Repeat(" ", MaxBytes) + "]"} {
		if _, err := Decode([]byte(body)); !errors.Is(err, ErrInvalid) {
			t.Errorf("body %.40q: err %v, want ErrInvalid", body, err)
		}
	}
	els, err = Decode([]byte(`{"kind": 1}`))
	if err != nil || len(els) != 1 || !errors.Is(els[0].Err, ErrInvalid) {
		t.Errorf("invalid single command: %+v, %v", els, err)
	}
}

// Ids are checked at decode: a path, or anything else that is not a UUID,
// in an instance or volume id makes the command invalid (poisoned, never
// retried against Placement).
func TestDecodeRejectsNonUUIDIDs(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(*Command){
		"instance path":    func(c *Command) { c.InstanceUUID = "../../etc/passwd" },
		"instance short":   func(c *Command) { c.InstanceUUID = "178b0921-8f85-4257-88b6-2e743b5a975" },
		"instance bad hex": func(c *Command) { c.InstanceUUID = "178b0921-8f85-4257-88b6-2e743b5a975g" },
		"volume": func(c *Command) {
			c.Kind = KindVolume
			c.Volume = &VolumeChange{Action: "attach", VolumeID: "v1"}
		},
		"block device volume": func(c *Command) { c.Volumes = []string{"a07f71dc-8151-4e7d-a0cc-cd24a3f11113", "/dev/vda"} },
	} {
		c := valid()
		mod(c)
		b, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		els, err := Decode(b)
		if err != nil || len(els) != 1 || !errors.Is(els[0].Err, ErrInvalid) || !strings.Contains(els[0].Err.Error(), "is not a UUID") {
			t.Errorf("%s: %+v, %v; want ErrInvalid naming the id", name, els, err)
		}
	}
}

// FuzzDecode: the plain decoder never panics, every rejection is
// ErrInvalid, and every command it returns is valid and re-encodes to a
// body that decodes to the same command.
func FuzzDecode(f *testing.F) {
	c := valid()
	c.MessageID, c.RequestID, c.Node = "m-1", "req-1", "node-1"
	c.Volumes = []string{"a07f71dc-8151-4e7d-a0cc-cd24a3f11113"}
	one, _ := Marshal(c)
	c.Kind = KindVolume
	c.Volume = &VolumeChange{Action: "swap", OldVolumeID: "a07f71dc-8151-4e7d-a0cc-cd24a3f11113", NewVolumeID: "227cc671-f30b-4488-96fd-7d0bf13648d8", IsRoot: true}
	two, _ := Marshal(c)
	for _, s := range []string{
		string(one), string(two), "[" + string(one) + "," + string(two) + "]",
		`[` + string(one) + `, {"version": 2}]`, `{"version":1,"kind":"release","kind":"claim"}`,
		`{"version":"1"}`, `{"instance_uuid":"../../etc/passwd"}`, `[]`, `[1]`, `{} x`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		els, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		for i, el := range els {
			if el.Err != nil {
				if !errors.Is(el.Err, ErrInvalid) || el.Command != nil {
					t.Fatalf("element %d: %+v", i, el)
				}
				continue
			}
			if err := el.Command.Validate(); err != nil {
				t.Fatalf("element %d decoded but invalid: %v", i, err)
			}
			again, err := Marshal(el.Command)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Unmarshal(again)
			if err != nil || !back.Timestamp.Equal(el.Command.Timestamp) || back.InstanceUUID != el.Command.InstanceUUID || back.Kind != el.Command.Kind {
				t.Fatalf("element %d does not round-trip: %+v, %v", i, back, err)
			}
		}
	})
}
