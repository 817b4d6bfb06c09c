// Package gctune gives scourd's Go runtime its garbage-collection
// defaults, where the environment does not choose them.
//
// scourd's live heap is small (a few MiB) and it allocates for every
// message, so at Go's default GOGC=100 the collector ran every ~10 ms
// under load (290 cycles in 6 s of bench-ingest's relevant-only burst,
// heap goal 4-6 MiB) and, with the scavenger handing pages back to the
// OS only to fault them in again, took about a fifth of scourd's CPU per
// notification. A larger GOGC makes cycles rarer for a few MiB more
// memory; GOMEMLIMIT keeps that from growing without bound if the live
// heap ever does (near the limit the collector runs more often, as at a
// smaller GOGC). The GOGC and GOMEMLIMIT environment variables, when
// set, win: the runtime has already applied them.
package gctune

import (
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
)

const (
	// GCPercent is scourd's GOGC: the heap may grow to 5x what is live
	// before a collection.
	GCPercent = 400
	// MemoryLimit is scourd's GOMEMLIMIT: 75% of the DaemonSet's 256 MiB
	// container limit (deploy/daemonset.yaml).
	MemoryLimit = 192 << 20
)

// Settings is what is in effect after Apply.
type Settings struct {
	GCPercent   int   // -1: collection off
	MemoryLimit int64 // bytes; math.MaxInt64: none
	FromEnv     bool  // GOGC or GOMEMLIMIT came from the environment (that one was left alone)
}

// Apply sets GCPercent unless getenv("GOGC") is set and MemoryLimit
// unless getenv("GOMEMLIMIT") is set, and returns what is in effect.
func Apply(getenv func(string) string) Settings {
	var s Settings
	if getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	} else {
		s.FromEnv = true
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(MemoryLimit)
	} else {
		s.FromEnv = true
	}
	s.GCPercent, s.MemoryLimit = current()
	return s
}

// current reads the runtime's settings without changing them.
func current() (gcPercent int, memoryLimit int64) {
	m := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(m)
	// The runtime stores GOGC as a signed number: off (-1) reads as MaxUint64.
	return int(int64(m[0].Value.Uint64())), int64(m[1].Value.Uint64())
}

// String is the settings in environment-variable form.
func (s Settings) String() string {
	gogc := "off"
	if s.GCPercent >= 0 {
		gogc = fmt.Sprint(s.GCPercent)
	}
	limit := "none"
	if s.MemoryLimit != math.MaxInt64 {
		limit = fmt.Sprintf("%dMiB", s.MemoryLimit>>20)
	}
	return fmt.Sprintf("GOGC=%s GOMEMLIMIT=%s", gogc, limit)
}
