package app

import (
	"errors"
	"fmt"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/placement"
)

// The claims store journals un-reserve PUTs for the Placement client: both
// must mean the same by a PUT at an unrecorded generation (the v6
// migration writes it), and the store's journal must be one the client
// takes.
var _ placement.PutJournal = claims.PutJournal{}

func TestUnknownPutGenerationAgrees(t *testing.T) {
	if claims.UnknownPutGeneration != placement.UnknownPutGeneration {
		t.Fatalf("claims.UnknownPutGeneration = %d, placement.UnknownPutGeneration = %d", claims.UnknownPutGeneration, placement.UnknownPutGeneration)
	}
}

// gateErr gives each refusal of the Placement client the handlers' name
// for it, through the client's DeviceError wrapping.
func TestGateErrNamesRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want error
	}{
		{placement.ErrAllocated, handlers.ErrAllocated},
		{placement.ErrNotAllocated, handlers.ErrNotAllocated},
		{placement.ErrUnmanaged, handlers.ErrUnmanaged},
		{placement.ErrQuarantined, handlers.ErrQuarantined},
		{placement.ErrUnreservedElsewhere, handlers.ErrUnreservedElsewhere},
		{placement.ErrStaleReturn, handlers.ErrStaleReturn},
		{claims.ErrNotCleaned, handlers.ErrRunClosed},
	}
	for _, tt := range tests {
		err := gateErr(&placement.DeviceError{Op: "unreserve", Dev: placement.Ref{UUID: "rp-1"}, Err: fmt.Errorf("x: %w", tt.err)})
		if !errors.Is(err, tt.want) || !errors.Is(err, tt.err) {
			t.Errorf("gateErr(%v) = %v; want it to wrap %v", tt.err, err, tt.want)
		}
		if handlers.IsPermanent(err) {
			t.Errorf("gateErr(%v) is permanent", tt.err)
		}
	}
}
