package handlers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/scour-project/scour/placement"
)

// Nova can re-create a device's provider with a new UUID at the same PCI
// address (a rebuilt Placement database, a compute node re-registered):
// reserved 0, Nova's own traits only. The store's knowledge of the device
// (its open quarantine, its tenant since its last clean) is keyed by the
// provider's UUID, so it follows the device by (host, address): the scan
// records each provider's address (from the names of this host's tree,
// rule 3), a quarantine whose provider left the tree moves to the
// provider at its address, and PreviousTenant reads every provider seen
// at the address. A different card at the same address (swapped while the
// host was down) is fenced and cleaned once more: the fail-safe side.

// sawAddresses records the address of each provider of the scan that
// this process has not recorded yet. A failure is logged: the device's
// knowledge follows it once a later scan records it.
func (r *Reconciler) sawAddresses(ctx context.Context, devs []Device) {
	for _, d := range devs {
		r.mu.Lock()
		known := d.Address == "" || r.addresses[d.RPUUID] == d.Address
		r.mu.Unlock()
		if known {
			continue
		}
		err := r.c.SawAddress(ctx, d.RPUUID, d.Address)
		r.forgetAllTenants() // whose history counts at the address may change
		if err != nil {
			r.log.Warn("could not record a device provider's PCI address; if Nova re-creates the provider, what the store knows of the device does not follow it until a scan records it", "device", d.RPName, "rp", d.RPUUID, "address", d.Address, "error", err)
			continue
		}
		r.mu.Lock()
		r.addresses[d.RPUUID] = d.Address
		r.mu.Unlock()
	}
}

// reattachment is an open quarantine whose provider left the tree, and
// the provider the tree shows at its address now.
type reattachment struct {
	from string
	to   Device
	q    OpenQuarantine
}

// followQuarantines re-keys the open quarantines by the scan's providers:
// one whose provider is not in the tree belongs to the provider at its
// address (moves), or, with none there, is orphaned. It does not write.
func followQuarantines(devs []Device, open map[string]OpenQuarantine) (map[string]OpenQuarantine, []reattachment, []string) {
	inTree := map[string]bool{}
	for _, d := range devs {
		inTree[d.RPUUID] = true
	}
	out := maps.Clone(open)
	var moves []reattachment
	var orphans []string
	for _, rp := range slices.Sorted(maps.Keys(open)) {
		q := open[rp]
		if inTree[rp] {
			continue
		}
		i := slices.IndexFunc(devs, func(d Device) bool { return q.Address != "" && d.Address == q.Address })
		if i < 0 {
			orphans = append(orphans, rp)
			continue
		}
		to := devs[i]
		delete(out, rp)
		if _, own := out[to.RPUUID]; !own {
			out[to.RPUUID] = q
		}
		moves = append(moves, reattachment{from: rp, to: to, q: q})
	}
	return out, moves, orphans
}

// reattach moves each quarantine of moves to its re-created provider in
// the store, with a WARN naming both providers, counted in
// scour_lifecycle_providers_recreated_total{knowledge="quarantine"}. The
// scan sets the quarantine in Placement either way (followQuarantines);
// a failed move is retried at the next scan.
func (r *Reconciler) reattach(ctx context.Context, moves []reattachment) error {
	ql, ok := r.c.(QuarantineLister)
	if !ok {
		return nil
	}
	var errs []error
	for _, mv := range moves {
		d := mv.to
		if _, err := ql.ReattachQuarantine(ctx, mv.from, d.RPUUID, d.Address); err != nil {
			errs = append(errs, fmt.Errorf("device %s: moving its quarantine (%s) from provider %s, no longer in the tree, to its re-created provider %s: %w (the device is kept quarantined in Placement meanwhile; retried at the next scan)", d.RPName, mv.q.Reason, mv.from, d.RPUUID, err))
			continue
		}
		r.m.recreated.WithLabelValues(knowledgeQuarantine).Inc()
		if mv.q.Retired {
			// Fail-safe: a retirement stays on whatever card is at its
			// address, a replacement card too (scour cannot tell one
			// card from another there); the operator releases it.
			r.log.Warn("device provider was re-created at the same PCI address; its retirement follows it and keeps the device out of the pool (if this is a replacement card, release it: scourctl placement unquarantine "+string(d.Address)+")",
				"device", d.RPName, "address", d.Address, "old_rp", mv.from, "rp", d.RPUUID, "reason", mv.q.Reason,
				"reserved", d.Reserved, "total", d.Total, "quarantine_trait", d.Quarantined)
			continue
		}
		r.log.Warn("device provider was re-created at the same PCI address; its quarantine follows it",
			"device", d.RPName, "address", d.Address, "old_rp", mv.from, "rp", d.RPUUID, "reason", mv.q.Reason,
			"reserved", d.Reserved, "total", d.Total, "quarantine_trait", d.Quarantined)
	}
	return errors.Join(errs...)
}

// reportOrphans sets scour_lifecycle_quarantines_orphaned, by state, and
// logs at WARN each open quarantine whose provider is not in the tree,
// with no provider at its address, when it becomes so: nothing in
// Placement keeps the device out of the pool on its word. A retirement
// (state retired) is what the RMA steps leave behind once the device is
// removed from [pci] device_spec and Nova deletes its provider: it is
// counted apart and not alerted on; a cleaning verdict's (state
// quarantined) is alerted on (ScourQuarantineOrphaned). Either is
// released with scourctl placement unquarantine --rp, which refuses
// while the provider or one at its address is in the tree.
func (r *Reconciler) reportOrphans(orphans []string, open map[string]OpenQuarantine) {
	n := map[string]int{string(placement.StateQuarantined): 0, gaugeRetired: 0}
	for _, rp := range orphans {
		n[quarantinedState(open, rp)]++
	}
	for state, v := range n {
		r.m.orphaned.WithLabelValues(state).Set(float64(v))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := map[string]bool{}
	for _, rp := range orphans {
		now[rp] = true
		if r.orphans[rp] {
			continue
		}
		q := open[rp]
		if q.Retired {
			r.log.Warn("retired device's provider is not in this host's Placement tree, and no provider is at its address (expected once a retired device is removed from [pci] device_spec); a provider at its address is kept retired (a replacement card too: release it then with scourctl placement unquarantine ADDRESS); to close the retirement of a device that is gone for good: scourctl placement unquarantine --rp RP",
				"rp", rp, "address", q.Address, "reason", q.Reason, "retired", true)
			continue
		}
		r.log.Warn("open quarantine's device provider is not in this host's Placement tree, and no provider is at its address; it is re-attached when one comes back (check the provider in Placement; if the device is gone for good, release it with scourctl placement unquarantine --rp RP)",
			"rp", rp, "address", q.Address, "reason", q.Reason, "retired", false)
	}
	r.orphans = now
}

// Kinds of knowledge that follow a re-created provider (the label of
// scour_lifecycle_providers_recreated_total).
const (
	knowledgeQuarantine = "quarantine"
	knowledgeTenant     = "tenant"
)
