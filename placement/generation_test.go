package placement

import (
	"context"
	"testing"
)

// The generation a run keeps for its resume is the one of the read its
// all-clear came from, known without asking Placement again; the resume's
// own read of it is one request.
func TestGateGenerations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, f := newTestGate(t, &gateDevice{res: 1})
	if _, ok := g.CheckedGeneration(unitDev.UUID); ok {
		t.Fatal("CheckedGeneration before any check: ok; want none")
	}
	if in, _, err := g.HasAllocationsAsOf(ctx, unitDev.UUID); err != nil || in {
		t.Fatalf("HasAllocationsAsOf = %v, %v; want the all-clear", in, err)
	}
	before := f.count("")
	if gen, ok := g.CheckedGeneration(unitDev.UUID); !ok || gen != 7 {
		t.Fatalf("CheckedGeneration = %d, %v; want 7 (the check's read)", gen, ok)
	}
	gen, err := g.Generation(ctx, unitDev.UUID)
	if err != nil || gen != 7 {
		t.Fatalf("Generation = %d, %v; want 7", gen, err)
	}
	if n := f.count("") - before; n != 1 {
		t.Fatalf("CheckedGeneration and Generation made %d requests; want 1 (Generation's read)", n)
	}
}
