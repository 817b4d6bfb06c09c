package hardware

import (
	"context"
	"errors"
	"testing"
)

// listing is a Backend whose List answers addrs, err; nothing else is
// called by Presence.
type listing struct {
	Backend
	addrs []Address
	err   error
}

func (l listing) List(context.Context) ([]Address, error) { return l.addrs, l.err }

// A device is present only when discovery lists it; a failed discovery is
// an error and never counts as present (rule 3).
func TestPresenceOnlyFromDiscovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := Presence{listing{addrs: []Address{"0000:81:00.0"}}}
	if ok, err := p.Present(ctx, "0000:81:00.0"); !ok || err != nil {
		t.Errorf("listed device: Present = %v, %v; want true, nil", ok, err)
	}
	if ok, err := p.Present(ctx, "0000:82:00.0"); ok || err != nil {
		t.Errorf("unlisted device: Present = %v, %v; want false, nil", ok, err)
	}
	boom := errors.New("sysfs unreadable")
	p = Presence{listing{addrs: []Address{"0000:81:00.0"}, err: boom}}
	if ok, err := p.Present(ctx, "0000:81:00.0"); ok || !errors.Is(err, boom) {
		t.Errorf("failed discovery: Present = %v, %v; want false and the discovery error", ok, err)
	}
}
