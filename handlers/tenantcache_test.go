package handlers_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/scour-project/scour/command"
	"github.com/scour-project/scour/handlers"
)

// countTenantReads counts the store's PreviousTenant calls.
func countTenantReads(e *env) *atomic.Int64 {
	var n atomic.Int64
	e.c.Fail = func(op string) error {
		if op == "PreviousTenant" {
			n.Add(1)
		}
		return nil
	}
	return &n
}

// A tenant recorded by this process for a device that refence's cache
// holds as not held (the claim of a create.end handled after the scan
// that cached it) drops the entry: the device, un-fenced before scour
// cleaned it, is fenced again at the very next scan, a triggered one.
// Without the drop, triggered scans skip it until the periodic scan.
func TestRefenceCacheDroppedWhenATenantIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	reads := countTenantReads(e)
	e.scanOnce() // the first scan asks about both: held by nobody, cached
	e.scanOnce()
	if n := reads.Load(); n != 2 {
		t.Fatalf("PreviousTenant read %d times over a full scan and a triggered one of 2 available devices; want 2 (the triggered scan uses the cache)", n)
	}
	e.w.Allocate(tenantA, false, rp(1))
	e.handle(cmd(command.KindClaim, "instance.create.end", tenantA)) // recorded, burned
	e.w.Free(tenantA)
	e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 }) // the fence lifted before any scan
	e.scanOnce()
	if d := e.w.Device(rp(1)); d.Reserved != d.Total {
		t.Fatalf("device instance A held (its claim recorded after the cache said not held), un-fenced: reserved %d/%d after a triggered scan; in the pool uncleaned", d.Reserved, d.Total)
	}
}

// A tenant this process did not record (another process wrote the
// store) while the device's Placement view did not move is caught by the
// next periodic scan, which asks the store about every device.
func TestRefencePeriodicScanIgnoresTheCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	e.scanOnce() // cached: held by nobody
	if err := e.c.SawHolder(context.Background(), rp(1), tenantA); err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"interval", "retry"} {
		e.w.Set(rp(1), func(d *handlers.Device) { d.Reserved = 0 })
		if err := e.r.Scan(context.Background(), reason); err != nil {
			t.Fatal(err)
		}
		if d := e.w.Device(rp(1)); d.Reserved != d.Total {
			t.Errorf("%s scan: device the store says instance A held since its last clean: reserved %d/%d; the periodic scan must not use the cache", reason, d.Reserved, d.Total)
		}
	}
}
