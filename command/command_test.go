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
