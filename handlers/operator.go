package handlers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/placement"
)

// OperatorRecords is what the operator commands' decisions read of the
// claims store: its open quarantines (the rule-4 authority) and the last
// tenant it knows of a device.
type OperatorRecords interface {
	ActiveQuarantine(ctx context.Context, host, deviceRP string) (claims.Quarantine, bool, error)
	PreviousTenant(ctx context.Context, host, rpUUID string) (claims.Tenant, bool, error)
}

// Operator decides the operator commands on one device (scourctl clean,
// scourctl retire) from what Placement shows of it and what the claims
// store holds; the admin socket's caller does the writes it allows.
type Operator struct {
	Records OperatorRecords
	Host    string
}

// CleanRefusal says why an operator's clean of d is refused (an
// *admin.OperatorError), or nil when it may go on: a device in use is
// never reserved for cleaning under its instance (rule 2; it is cleaned
// when the instance releases it), and a quarantined one, in Placement or
// only in the store, is cleaned by its release and nothing else (rule 4).
func (o Operator) CleanRefusal(ctx context.Context, d placement.Device) error {
	switch {
	case len(d.Consumers) > 0:
		return &admin.OperatorError{Msg: fmt.Sprintf("device %s is allocated to %s: refusing to clean a device in use (it is cleaned when its instance releases it)",
			d.Address, strings.Join(d.Consumers, ","))}
	case d.Quarantined:
		return &admin.OperatorError{Msg: fmt.Sprintf("device %s is quarantined: release it first (scourctl placement unquarantine %s), which cleans it", d.Address, d.Address)}
	}
	q, held, err := o.Records.ActiveQuarantine(ctx, o.Host, d.UUID)
	if err != nil {
		return fmt.Errorf("device %s: cannot tell whether the claims store holds it quarantined, so not cleaned (retry; check the claims database): %w", d.Address, err)
	}
	if held {
		return &admin.OperatorError{Msg: fmt.Sprintf("device %s is quarantined in the store (%s): release it first (scourctl placement unquarantine %s)", d.Address, q.Reason, d.Address)}
	}
	return nil
}

// CleanReport is what an operator's scourctl clean of d answers once
// Placement showed it reserved (placement.Client.Reserve), before and
// after being the reconciler's RunMarks of d taken around that read or
// write. A device with a run in flight meanwhile is not said to be
// reserved: that run's un-reserve PUT may have been in flight too, so
// Reserve read reserved = total and wrote nothing, and the PUT landed
// after (review rev5 F9). The device is then back in the pool, cleaned by
// that run. A device backing off after a failed run is cleaned when its
// backoff ends, not now.
func CleanReport(d placement.Device, before, after RunMark) string {
	follow := "(follow it: scourctl status)"
	switch {
	case RanDuring(before, after):
		return fmt.Sprintf("device %s (%s) was being cleaned by scourd already (a run of it was in flight): it returns to the pool only after a clean run, that one or a new one, and may be back already if that run just ended clean %s\n",
			d.Address, d.UUID, follow)
	case !after.BackoffUntil.IsZero():
		return fmt.Sprintf("device %s (%s) is reserved; its last cleaning run failed, so scourd cleans it when its backoff ends, at %s; it returns to the pool after a clean run %s\n",
			d.Address, d.UUID, after.BackoffUntil.UTC().Format(time.RFC3339), follow)
	}
	return fmt.Sprintf("device %s (%s) is reserved and scourd cleans it now; it returns to the pool after a clean run %s\n", d.Address, d.UUID, follow)
}

// RetireWipe decides what an operator's retirement of d waits for: a
// device not cleaned since its last tenant (in use, quarantined, reserved
// and not yet returned clean, or used since its last clean as the store
// knows, or holding a failed-cleaning verdict in the store) waits for the
// retirement wipe (claims.WipePending), or with noWipe for its NOT WIPED
// record (claims.WipeDeclined); any other holds no tenant's data and needs
// none (""). note says which, for the retirement's reason.
func (o Operator) RetireWipe(ctx context.Context, d placement.Device, noWipe bool) (wipe, note string, err error) {
	dirty := d.InUse() || d.Quarantined || d.Fenced()
	if !dirty {
		_, ok, err := o.Records.PreviousTenant(ctx, o.Host, d.UUID)
		if err != nil {
			return "", "", fmt.Errorf("device %s: cannot tell whether it was cleaned since its last tenant, so not retired (retry; check the claims database): %w", d.Address, err)
		}
		dirty = ok
	}
	if !dirty {
		// A quarantine verdict the store holds (Placement may have lost
		// its trait): the device failed cleaning.
		q, ok, err := o.Records.ActiveQuarantine(ctx, o.Host, d.UUID)
		if err != nil {
			return "", "", fmt.Errorf("device %s: cannot tell whether it is quarantined, so not retired (retry; check the claims database): %w", d.Address, err)
		}
		dirty = ok && !q.Retired()
	}
	switch {
	case dirty && noWipe:
		return claims.WipeDeclined, pipeline.NoWipeWhy + ": it may still hold its last tenant's data; destroy it (shred, or degauss)", nil
	case dirty:
		return claims.WipePending, "not cleaned since its last tenant: wiped before it leaves (retirement wipe pending)", nil
	}
	return "", "not wiped: none needed, it holds no tenant's data (cleaned since its last tenant, or never used)", nil
}

// DeviceNow reads what claims.Store.SettleReturns decides a cleaned
// record's settlement from: whether Placement shows the device fully
// reserved (scour's un-reserve did not land) and whether anything holds
// an allocation on it (returned and taken since). read is Placement's
// fresh read of one provider.
func DeviceNow(read func(ctx context.Context, dev placement.Ref) (placement.Device, error)) func(ctx context.Context, rp string) (claims.DeviceNow, error) {
	return func(ctx context.Context, rp string) (claims.DeviceNow, error) {
		d, err := read(ctx, placement.Ref{UUID: rp, Name: rp})
		if err != nil {
			return claims.DeviceNow{}, err
		}
		return claims.DeviceNow{Reserved: d.Fenced(), Allocated: d.InUse()}, nil
	}
}

// RetireReport is what an operator's scourctl retire of d answers once
// the store recorded it (claims.Store.Retire's outcome and the quarantine
// it found) with wipe and note from RetireWipe: what the device is now,
// whether it still serves an instance, and what its retirement waits for
// (q's wipe when the store made a retirement decided "no wipe" wait for
// one).
func RetireReport(d placement.Device, outcome claims.RetireOutcome, q claims.Quarantine, wipe, note string) string {
	if outcome == claims.RetireStands {
		return alreadyRetired(d, q)
	}
	if outcome == claims.RetireCreated && wipe == "" && q.Wipe != "" {
		// The store knew of a tenant RetireWipe's reads did not see
		// (claims.Store.Retire decides again): the retirement waits for
		// its wipe.
		wipe = q.Wipe
	}
	msg := fmt.Sprintf("device %s (%s) is retired: reserved and never returned until scourctl placement unquarantine %s\n", d.Address, d.UUID, d.Address)
	if outcome == claims.RetireRecordedOnQuarantine {
		msg += fmt.Sprintf("it was already quarantined (%s): that quarantine stays, and now records this retirement\n", q.Reason)
	}
	if len(d.Consumers) > 0 {
		msg += fmt.Sprintf("it is in use by %s: it leaves the pool when that instance releases it\n", strings.Join(d.Consumers, ","))
	}
	follow := "follow it with scourctl status, or scourctl records list --device " + string(d.Address)
	switch wipe {
	case claims.WipePending:
		msg += "it was not cleaned since its last tenant: scourd wipes it with its retirement wipe first (once no instance holds it), keeping it reserved; " +
			"the outcome, wiped or RETIRED UNWIPED, is in its record (" + follow + ")\n"
	case claims.WipeDeclined:
		msg += "NOT WIPED (operator chose --no-wipe): it may still hold its last tenant's data; destroy it (shred, or degauss); its record says so (" + follow + ")\n"
	default:
		msg += note + "\n"
	}
	return msg
}

// alreadyRetired answers a retirement of a device whose open quarantine
// stands unchanged: what it is and what its retirement wipe is at.
func alreadyRetired(d placement.Device, q claims.Quarantine) string {
	what := "retired"
	if !q.Retired() {
		what = "quarantined by run " + q.RunID
	}
	var wipe string
	switch {
	case q.Wipe == claims.WipePending:
		wipe = "its retirement wipe is pending: scourd wipes it once no instance holds it, keeping it reserved"
	case q.Wipe == claims.WipeDeclined:
		wipe = "NOT WIPED (operator chose --no-wipe): its retirement run records it so; destroy it (shred, or degauss)"
	case q.Retired():
		wipe = "no retirement wipe waits: its reason says whether it was wiped, needed none, or is NOT WIPED"
	default:
		wipe = "it needs no retirement wipe"
	}
	return fmt.Sprintf("device %s (%s) was already %s; that stands (%s)\n%s (scourctl status; scourctl records list --device %s)\n",
		d.Address, d.UUID, what, q.Reason, wipe, d.Address)
}
