package handlers

import (
	"maps"

	"github.com/scour-project/scour/hardware"
)

// refence asks the store, for every free, unfenced device of a scan,
// whether a tenant held it since its last clean (PreviousTenant: about
// five queries a device). Most devices are available and stay so: the
// answer is "no" scan after scan. notHeld caches that answer, and
// triggered scans (every notification triggers one) use it; the first
// scan of the process and the periodic ones ("interval", "retry") ask
// the store for every device again.
//
// Why the cache misses no tenant: PreviousTenant's answer goes from "not
// held" to "held" only by a store write that adds tenant knowledge about
// the device's address: a holder seen (SawHolder), a claim recorded or
// rebuilt with the device (RecordClaim), a dormant claim woken
// (Reactivate, which re-dates its devices' tenancy), a provider seen at
// the address (SawAddress, which changes whose history counts), or a
// cleaned run closed as possibly used after its clean
// (RecordUsedAfterClean, or the settle's CloseCleanedUsed, after which
// that clean no longer counts). This process makes each of these writes
// through its handlers and reconciler (the settle tells it:
// SettledReturns), and each drops the cache entries of the devices it
// concerns, at the address too (forgetTenant), or all of them
// (forgetAllTenants) when it cannot name them. A check that began before
// such a write may have read the older answer: its entry is stored only
// if no write dropped entries since it began (epoch). A device the scan
// sees allocated loses its entry too. Writes this process does not make
// (another scourd on the same host, a store edited by hand) are caught by
// the next periodic scan, as before the cache: within
// lifecycle.reconcile_interval.
type notHeld struct {
	addr hardware.Address // the address it was checked at
}

// fullRefence reports whether the scan of reason checks every device
// against the store, without the cache: the first scan of the process
// and the periodic ones.
func (r *Reconciler) fullRefence(reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.refenced
	r.refenced = true
	return first || reason == "start" || reason == "interval" || reason == "retry"
}

// knownNotHeld reports a device this process checked and found held by
// no tenant since its last clean, with no tenant write since; epoch is
// what noteNotHeld needs if the caller checks the store instead.
func (r *Reconciler) knownNotHeld(d Device) (known bool, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.notHeld[d.RPUUID]
	return ok && e.addr == d.Address, r.tenantEpoch
}

// noteNotHeld caches the store's "not held" for d, read by a check that
// began at epoch, unless a tenant write dropped entries since.
func (r *Reconciler) noteNotHeld(d Device, epoch uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tenantEpoch == epoch {
		r.notHeld[d.RPUUID] = notHeld{addr: d.Address}
	}
}

// forgetTenant drops the cached answer of provider rp and of every
// device at its address (addr, or the one the scans saw rp at): a
// tenant write about rp, made or attempted. Call it after the write.
func (r *Reconciler) forgetTenant(rp string, addr hardware.Address) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tenantEpoch++
	if addr == "" {
		addr = r.addresses[rp]
	}
	if addr == "" { // where rp is is unknown here: any device could be it
		clear(r.notHeld)
		return
	}
	delete(r.notHeld, rp)
	maps.DeleteFunc(r.notHeld, func(_ string, e notHeld) bool { return e.addr == addr })
}

// forgetAllTenants drops every cached answer: a tenant write whose
// devices the caller cannot name.
func (r *Reconciler) forgetAllTenants() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tenantEpoch++
	clear(r.notHeld)
}

// forgetClaim drops the cached answers of the devices of claim c.
func (r *Reconciler) forgetClaim(c Claim) {
	for _, d := range c.Devices {
		r.forgetTenant(d.RPUUID, d.Address)
	}
}
