package gctune

import (
	"math"
	"runtime/debug"
	"testing"
)

// restore puts the test binary's own settings back.
func restore(t *testing.T) {
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestApplySetsDefaultsWhenTheEnvironmentIsSilent(t *testing.T) {
	restore(t)
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	s := Apply(env(nil))
	if s.GCPercent != GCPercent || s.MemoryLimit != MemoryLimit || s.FromEnv {
		t.Fatalf("Apply() = %+v, want GOGC %d, limit %d, not from env", s, GCPercent, MemoryLimit)
	}
	if got := debug.SetGCPercent(-1); got != GCPercent {
		t.Errorf("runtime GC percent %d, want %d", got, GCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != MemoryLimit {
		t.Errorf("runtime memory limit %d, want %d", got, MemoryLimit)
	}
	if got, want := s.String(), "GOGC=400 GOMEMLIMIT=192MiB"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// What the operator set in the environment (already applied by the
// runtime at start) is left alone, each variable on its own.
func TestApplyLeavesTheEnvironmentsChoice(t *testing.T) {
	restore(t)
	debug.SetGCPercent(150) // as the runtime would for GOGC=150
	debug.SetMemoryLimit(math.MaxInt64)
	s := Apply(env(map[string]string{"GOGC": "150"}))
	if s.GCPercent != 150 || s.MemoryLimit != MemoryLimit || !s.FromEnv {
		t.Errorf("GOGC=150 set: Apply() = %+v, want GOGC kept at 150 and the default limit", s)
	}
	debug.SetGCPercent(-1) // GOGC=off
	debug.SetMemoryLimit(1 << 30)
	s = Apply(env(map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}))
	if s.GCPercent != -1 || s.MemoryLimit != 1<<30 {
		t.Errorf("GOGC=off GOMEMLIMIT=1GiB set: Apply() = %+v, want both kept", s)
	}
	if got, want := s.String(), "GOGC=off GOMEMLIMIT=1024MiB"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
