package hardware

import (
	"context"
	"fmt"
	"slices"
)

// Presence answers whether a PCI function exists on this host, from the
// backend's discovery (safety rule 3: a device is cleaned only when this
// host's hardware discovery finds it). A failed discovery is an error,
// never "present".
type Presence struct{ Backend Backend }

// Present reports whether addr is among the addresses the backend lists.
func (p Presence) Present(ctx context.Context, addr Address) (bool, error) {
	addrs, err := p.Backend.List(ctx)
	if err != nil {
		return false, fmt.Errorf("hardware discovery: %w", err)
	}
	return slices.Contains(addrs, addr), nil
}
