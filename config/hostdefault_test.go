package config

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
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

// openElsewhere answers OpenUnderOtherNames with its records, and
// remembers the nodes asked about.
type openElsewhere struct {
	open  []claims.HostOpen
	err   error
	nodes []string
}

func (o *openElsewhere) OpenUnderOtherNames(_ context.Context, host string, nodes []string) ([]claims.HostOpen, error) {
	o.nodes = nodes
	return o.open, o.err
}

// A store holding open quarantines, runs, live claims or devices with a
// tenant no clean covered under another name of this machine stops the
// start with an ErrInvalid naming both names, the counts and the two ways
// out; nothing open elsewhere starts; a store that cannot answer stops
// the start with its error. The store is asked about the node and
// Placement's node.
func TestCheckRenamedHost(t *testing.T) {
	t.Parallel()
	cfg := &Config{Host: "cmp-b", Node: "node-1"}
	cfg.Placement.Node = "node-1.example.com"
	store := &openElsewhere{open: []claims.HostOpen{{Host: "cmp-a", Quarantines: 2, Runs: 1, Claims: 3, Uncovered: 4, Why: "its claims name node-1"}}}
	err := cfg.CheckRenamedHost(context.Background(), store)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	for _, want := range []string{"start as cmp-b", "host cmp-a (its claims name node-1): 2 open quarantines or retirements, 1 open cleaning runs, 3 live claims, 4 devices holding a tenant no clean covered",
		"set host: cmp-a", "scourctl host adopt cmp-a", "moves those records to cmp-b"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !slices.Equal(store.nodes, []string{"node-1", "node-1.example.com"}) {
		t.Errorf("asked about nodes %v, want node and placement.node", store.nodes)
	}
	if err := cfg.CheckRenamedHost(context.Background(), &openElsewhere{}); err != nil {
		t.Errorf("nothing open under another name: %v", err)
	}
	if err := cfg.CheckRenamedHost(context.Background(), &openElsewhere{err: errors.New("db down")}); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("store down: got %v, want the store's error", err)
	}
}
