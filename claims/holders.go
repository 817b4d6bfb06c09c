package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// SawHolder records that Placement showed consumer holding the device (a
// scan or a burn). Only a change of consumer is written, so the stored
// time is when the consumer was first seen; and the same consumer seen
// again after the device's last clean (it got the device back) is dated
// anew, since a clean ends what a holder held before it (PreviousTenant).
func (s *Store) SawHolder(ctx context.Context, host, rpUUID, consumer string) error {
	return s.SawHolderAt(ctx, host, rpUUID, consumer, time.Time{})
}

// SawHolderAt is SawHolder for a Placement read that began at at (zero,
// or later than now: now): the consumer is dated by when it was seen,
// not by when the record was written. A claim that read the instance
// holding a device, and records it after the device was freed, its
// release run begun since, names a tenant that run's erase covers: dated
// at the write it would look like a holder who came during that run. A
// read older than the holder stored never replaces it unless a clean
// covers the stored one: a slow claim must not hide a newer tenant no
// clean erased.
func (s *Store) SawHolderAt(ctx context.Context, host, rpUUID, consumer string, at time.Time) error {
	if consumer == "" {
		return nil
	}
	seen := s.now()
	if !at.IsZero() && at.Before(seen) {
		seen = at
	}
	_, err := s.exec(ctx, `INSERT INTO device_holders (host, device_rp, consumer, seen_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (host, device_rp) DO UPDATE SET consumer = excluded.consumer, seen_at = excluded.seen_at
		WHERE (device_holders.consumer <> excluded.consumer AND excluded.seen_at >= device_holders.seen_at)
		OR device_holders.seen_at <= COALESCE((`+lastCleanQuery+`), '')`, host, rpUUID, consumer, formatTS(seen), host, rpUUID)
	if err != nil {
		return fmt.Errorf("claims: record consumer %s holding device %s on host %s: %w", consumer, rpUUID, host, err)
	}
	return nil
}

// Tenant is a device's previous tenant, for a cleaning record.
type Tenant struct {
	Instance string
	Project  string // UnknownTenant when no claim of the instance names it
	// Since is when the tenant was first known to hold the device.
	Since time.Time
	// DeviceRP is the provider under which the tenant was known: another
	// than the one asked about when the device's provider was re-created.
	DeviceRP string
}

// PreviousTenant names the last consumer known to hold the device: the
// newer of the last one a scan or burn saw in Placement and the newest
// claim on the device. ok is false when neither exists, and when that
// consumer held the device before its last clean (a clean verdict of an
// earlier run): its data was erased then, and whoever used the device
// since went unseen (no claim, no scan caught it; e.g. a tenant that came
// and went while scourd was down). A record then says "unknown" rather
// than name a tenant whose data it did not erase. A run closed because
// the device may have served a tenant after its clean (CloseCleanedUsed:
// a stale return, a re-fence mid-run, an allocation or an un-reserve by
// someone else found at the un-reserve or the settle) erased what its
// device held when it began, but may have been followed by a tenant
// nobody recorded: with no consumer seen since it began, the tenant is
// UnknownTenant (ok true): the device holds data no clean covers, and a
// record names no tenant whose data that run erased.
//
// The device is every provider seen at its address on the host (aliases:
// its provider may have been re-created): the last clean is the newest of
// theirs, the tenant the newest known since under any of them, and
// DeviceRP says under which.
func (s *Store) PreviousTenant(ctx context.Context, host, rpUUID string) (Tenant, bool, error) {
	t, ok, err := s.previousTenantOfDevice(ctx, s.r, host, rpUUID)
	if err != nil {
		return Tenant{}, false, fmt.Errorf("claims: previous tenant of device %s on host %s: %w", rpUUID, host, err)
	}
	return t, ok, nil
}

func (s *Store) previousTenantOfDevice(ctx context.Context, q querier, host, rpUUID string) (Tenant, bool, error) {
	rps, err := s.aliases(ctx, q, host, rpUUID)
	if err != nil {
		return Tenant{}, false, err
	}
	cleaned, used, err := s.lastCleanOf(ctx, q, host, rps)
	if err != nil {
		return Tenant{}, false, err
	}
	return s.tenantSince(ctx, q, host, rps, cleaned, used)
}

// tenantSince is the last tenant known to hold the device (every provider
// of rps) since after. A run closed by CloseCleanedUsed (used) erased,
// like any clean, what the device held when it began: a tenant seen
// before it is covered. What it leaves is a tenant nobody recorded, who
// may have used the device since it began: with no tenant known since
// then, and no plain clean after it, that unseen tenant is held
// (UnknownTenant), since that run began. A record then says "unknown"
// rather than name a tenant whose data that run erased.
//
// after is never before used.At when it comes from lastCleanOf: the
// last-clean query counts such a run (lastCleanQuery).
func (s *Store) tenantSince(ctx context.Context, q querier, host string, rps []string, after time.Time, used usedRun) (Tenant, bool, error) {
	var last Tenant
	found := false
	for _, rp := range rps {
		t, ok, err := s.previousTenant(ctx, q, host, rp, after)
		if err != nil {
			return Tenant{}, false, err
		}
		if ok && (!found || t.Since.After(last.Since)) {
			last, found = t, true
			last.DeviceRP = rp
		}
	}
	if !found && !used.At.IsZero() && !used.At.Before(after) {
		return Tenant{Instance: UnknownTenant, Project: UnknownTenant, Since: used.At, DeviceRP: used.RP}, true, nil
	}
	return last, found, nil
}

// lastCleanQuery selects, for a host and device (two parameters), the
// point up to which the device's last clean covers its holders: when its
// newest cleaned or returned run started. A clean erases what was on the
// device when its destructive steps ran, which began after the run
// started; a consumer first seen after that (a tenant that got the
// device while the run was going on, behind a lifted fence: the run is
// then closed cleaned but not returned, docs/lifecycle.md) may have
// written after the erase, so the clean does not cover it, and it stays
// the device's previous tenant (named in the next run's record, and fenced
// again by the scan if its fence is lifted). The verdict's own time
// (cleaned_at) would hide that tenant. A cleaned run closed because the
// device may have served a tenant after its clean that the store never
// recorded (used_after_clean: CloseCleanedUsed) covers the holders before
// it like any clean, and leaves an unknown tenant held (tenantSince); a
// consumer seen again after it is dated anew (SawHolder).
const lastCleanQuery = `SELECT MAX(started_at) FROM cleaning_runs
	WHERE host = ? AND device_rp = ? AND state IN ('cleaned', 'returned')`

// lastClean is when the device's last clean began (its newest cleaned or
// returned run's start: lastCleanQuery); zero when it has none. usedAfter
// is when its newest run closed by CloseCleanedUsed began (zero: none).
func (s *Store) lastClean(ctx context.Context, q querier, host, rpUUID string) (last, usedAfter time.Time, err error) {
	var l, u sql.NullString
	err = q.QueryRowContext(ctx, s.d.rebind(`SELECT (`+lastCleanQuery+`),
		(SELECT MAX(started_at) FROM cleaning_runs WHERE host = ? AND device_rp = ? AND used_after_clean = 1)`),
		host, rpUUID, host, rpUUID).Scan(&l, &u)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	if l.Valid {
		if last, err = parseTS(l.String); err != nil {
			return time.Time{}, time.Time{}, err
		}
	}
	if u.Valid {
		if usedAfter, err = parseTS(u.String); err != nil {
			return time.Time{}, time.Time{}, err
		}
	}
	return last, usedAfter, nil
}

// previousTenant is the last consumer known to hold the device since
// after (zero: ever). A consumer seen or claimed only at or before after
// is not known to hold it since.
func (s *Store) previousTenant(ctx context.Context, q querier, host, rpUUID string, after time.Time) (Tenant, bool, error) {
	var held Tenant
	var seen string
	err := q.QueryRowContext(ctx, s.d.rebind(`SELECT consumer, seen_at FROM device_holders WHERE host = ? AND device_rp = ?`),
		host, rpUUID).Scan(&held.Instance, &seen)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return Tenant{}, false, err
	default:
		if held.Since, err = parseTS(seen); err != nil {
			return Tenant{}, false, err
		}
		held.Project = UnknownTenant
	}
	c, claimed, err := s.claimForDevice(ctx, q, host, rpUUID, `1 = 1`)
	if err != nil {
		return Tenant{}, false, err
	}
	var fromClaim Tenant
	if claimed {
		// Held since the device joined the claim (its creation, or an
		// attach later) or the claim's last unshelve, whichever is later.
		added, err := s.deviceAddedAt(ctx, q, c.ID, rpUUID)
		if err != nil {
			return Tenant{}, false, err
		}
		fromClaim = Tenant{Instance: c.InstanceUUID, Project: c.ProjectID, Since: added}
		if c.ReactivatedAt != nil && c.ReactivatedAt.After(added) {
			fromClaim.Since = *c.ReactivatedAt
		}
		if fromClaim.Project == "" {
			fromClaim.Project = UnknownTenant
		}
	}
	if held.Instance != "" && !held.Since.After(after) {
		held = Tenant{}
	}
	if held.Instance != "" && (!claimed || held.Instance != fromClaim.Instance) {
		// Placement names only a consumer: an instance the store holds a
		// claim of on this host is named with that claim's project.
		project, known, err := s.instanceProject(ctx, q, host, held.Instance)
		if err != nil {
			return Tenant{}, false, err
		}
		if known {
			held.Project = project
		}
	}
	if claimed && !fromClaim.Since.After(after) {
		claimed = false
	}
	switch {
	case held.Instance == "" && !claimed:
		return Tenant{}, false, nil
	case held.Instance == "":
		return fromClaim, true, nil
	case !claimed:
		return held, true, nil
	case held.Instance == fromClaim.Instance:
		fromClaim.Since = minTime(fromClaim.Since, held.Since)
		return fromClaim, true, nil
	case held.Since.After(fromClaim.Since):
		return held, true, nil
	}
	return fromClaim, true, nil
}

// instanceProject is the project of instance's newest claim on host;
// known is false when no claim there names the instance (a migration
// consumer, or a tenant scour never saw claim the device).
func (s *Store) instanceProject(ctx context.Context, q querier, host, instance string) (project string, known bool, err error) {
	err = q.QueryRowContext(ctx, s.d.rebind(`SELECT project_id FROM claims WHERE host = ? AND instance_uuid = ?
		ORDER BY created_at DESC, id LIMIT 1`), host, instance).Scan(&project)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	case project == "":
		project = UnknownTenant
	}
	return project, true, nil
}

// deviceAddedAt is when the device joined the claim, from claim_devices.
func (s *Store) deviceAddedAt(ctx context.Context, q querier, claimID, rpUUID string) (time.Time, error) {
	var added string
	if err := q.QueryRowContext(ctx, s.d.rebind(`SELECT created_at FROM claim_devices WHERE claim_id = ? AND device_rp = ?`),
		claimID, rpUUID).Scan(&added); err != nil {
		return time.Time{}, err
	}
	return parseTS(added)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
