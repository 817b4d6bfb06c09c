package config

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// hostRecords answers HostHasRecords from a set of hosts with rows.
type hostRecords map[string]bool

func (h hostRecords) HostHasRecords(_ context.Context, host string) (bool, error) {
	if h["fail"] {
		return false, errors.New("db down")
	}
	return h[host], nil
}

// scourd refuses to start under a defaulted FQDN host only when the store
// holds the short name's rows and none of the FQDN's, with an
// ErrInvalid naming both and saying to set host; a set host, a short
// hostname, a store with the FQDN's rows or an empty store starts; a
// store that cannot answer stops the start with its error.
func TestCheckDefaultHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		host      string
		defaulted bool
		store     hostRecords
		refused   bool
		err       bool
	}{
		{"upgrade from the short name", "cmp1.example.com", true, hostRecords{"cmp1": true}, true, false},
		{"host set", "cmp1.example.com", false, hostRecords{"cmp1": true}, false, false},
		{"short hostname", "cmp1", true, hostRecords{"cmp1": true}, false, false},
		{"FQDN rows already", "cmp1.example.com", true, hostRecords{"cmp1": true, "cmp1.example.com": true}, false, false},
		{"fresh store", "cmp1.example.com", true, hostRecords{}, false, false},
		{"store down", "cmp1.example.com", true, hostRecords{"fail": true}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := &Config{Host: tc.host, HostDefaulted: tc.defaulted}
			err := cfg.CheckDefaultHost(context.Background(), tc.store)
			switch {
			case tc.refused:
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "set host: cmp1") || !strings.Contains(err.Error(), "cmp1.example.com") {
					t.Fatalf("got %v, want ErrInvalid naming both hosts and saying to set host", err)
				}
			case tc.err:
				if err == nil || errors.Is(err, ErrInvalid) {
					t.Fatalf("got %v, want the store's error", err)
				}
			case err != nil:
				t.Fatalf("start refused: %v", err)
			}
		})
	}
}
