package claims

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

const claimCols = `id, host, node, instance_uuid, project_id, user_id, vcpus, memory_mb, disk_gb, pci,
	resize_target, state, volumes, root_volume_detached, message_id, last_message_id,
	created_at, updated_at, dormant_at, reactivated_at, released_at, release_reason`

type scanner interface{ Scan(dest ...any) error }

func scanClaim(sc scanner) (Claim, error) {
	var c Claim
	var pci, vols, created, updated string
	var resize, rootDetached int
	var dormant, react, released sql.NullString
	err := sc.Scan(&c.ID, &c.Host, &c.Node, &c.InstanceUUID, &c.ProjectID, &c.UserID, &c.VCPUs, &c.MemoryMB, &c.DiskGB, &pci,
		&resize, &c.State, &vols, &rootDetached, &c.MessageID, &c.LastMessageID,
		&created, &updated, &dormant, &react, &released, &c.ReleaseReason)
	if err != nil {
		return c, err
	}
	c.ResizeTarget, c.Volumes.RootDetached = resize != 0, rootDetached != 0
	if err := json.Unmarshal([]byte(pci), &c.PCI); err != nil {
		return c, fmt.Errorf("claim %s: pci column: %w", c.ID, err)
	}
	if err := json.Unmarshal([]byte(vols), &c.Volumes.Attached); err != nil {
		return c, fmt.Errorf("claim %s: volumes column: %w", c.ID, err)
	}
	if c.CreatedAt, err = parseTS(created); err == nil {
		c.UpdatedAt, err = parseTS(updated)
	}
	for _, p := range []struct {
		dst **time.Time
		v   sql.NullString
	}{{&c.DormantAt, dormant}, {&c.ReactivatedAt, react}, {&c.ReleasedAt, released}} {
		if err == nil {
			*p.dst, err = parseNullTS(p.v)
		}
	}
	if err != nil {
		return c, fmt.Errorf("claim %s: timestamp: %w", c.ID, err)
	}
	return c, nil
}

func (s *Store) queryClaims(ctx context.Context, q querier, where string, args ...any) ([]Claim, error) {
	return queryAll(ctx, q, s.d.rebind(`SELECT `+claimCols+` FROM claims WHERE `+where), scanClaim, args...)
}

// queryAll runs query and scans every row with scan.
func queryAll[T any](ctx context.Context, q querier, query string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func validateClaim(c Claim) error {
	var errs []error
	if c.Host == "" {
		errs = append(errs, errors.New("host is empty"))
	}
	if c.InstanceUUID == "" {
		errs = append(errs, errors.New("instance_uuid is empty"))
	}
	for i, d := range c.PCI {
		if d.RPUUID == "" {
			errs = append(errs, fmt.Errorf("pci[%d] (address %q) has no resource provider uuid", i, d.Address))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w for instance %s on host %s: %w", ErrInvalidClaim, c.InstanceUUID, c.Host, err)
	}
	return nil
}

// RecordClaim stores a claim, idempotently by (host, instance, device,
// resize_target): replaying the same claim changes nothing and returns
// created false. A claim for an instance that already has a live claim
// with the same resize_target adds the devices that claim lacks (an
// interface attach). A replay of the notification behind a claim that has
// since been released (same message id) is ignored, so a redelivered
// message cannot resurrect it. State and transition fields of c are
// ignored: a new claim is active.
func (s *Store) RecordClaim(ctx context.Context, c Claim) (created bool, err error) {
	if err := validateClaim(c); err != nil {
		return false, err
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		created = false
		live, err := s.queryClaims(ctx, tx, `host = ? AND instance_uuid = ? AND resize_target = ? AND state IN ('active', 'dormant')`+s.d.forUpdate,
			c.Host, c.InstanceUUID, boolInt(c.ResizeTarget))
		if err != nil {
			return err
		}
		if len(live) > 0 {
			created, err = s.addDevices(ctx, tx, live[0], c)
			return err
		}
		if c.MessageID != "" {
			var n int
			err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM claims WHERE host = ? AND instance_uuid = ? AND resize_target = ? AND message_id = ?`),
				c.Host, c.InstanceUUID, boolInt(c.ResizeTarget), c.MessageID).Scan(&n)
			if err != nil || n > 0 {
				return err
			}
		}
		created = true
		return s.insertClaim(ctx, tx, c)
	})
	if err != nil {
		return false, fmt.Errorf("claims: record claim of instance %s on host %s: %w", c.InstanceUUID, c.Host, err)
	}
	return created, nil
}

func (s *Store) insertClaim(ctx context.Context, tx *sql.Tx, c Claim) error {
	if c.PCI == nil {
		c.PCI = []PCIDevice{}
	}
	if c.Volumes.Attached == nil {
		c.Volumes.Attached = []Volume{}
	}
	pci, _ := json.Marshal(c.PCI)
	vols, _ := json.Marshal(c.Volumes.Attached)
	now := s.stamp()
	created := now
	if !c.CreatedAt.IsZero() {
		created = formatTS(c.CreatedAt)
	}
	id := newID()
	_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO claims (`+claimCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, '')`),
		id, c.Host, c.Node, c.InstanceUUID, c.ProjectID, c.UserID, c.VCPUs, c.MemoryMB, c.DiskGB, string(pci),
		boolInt(c.ResizeTarget), string(vols), boolInt(c.Volumes.RootDetached), c.MessageID, c.MessageID, created, now)
	if err != nil {
		return err
	}
	return s.indexDevices(ctx, tx, id, c.Host, created, c.PCI)
}

// indexDevices records in claim_devices that the claim names devs.
func (s *Store) indexDevices(ctx context.Context, tx *sql.Tx, claimID, host, created string, devs []PCIDevice) error {
	for _, d := range devs {
		if d.RPUUID == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO claim_devices (claim_id, host, device_rp, created_at)
			VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`), claimID, host, d.RPUUID, created); err != nil {
			return err
		}
	}
	return nil
}

// addDevices merges c's devices into the live claim; it reports whether
// anything was added.
func (s *Store) addDevices(ctx context.Context, tx *sql.Tx, have, c Claim) (bool, error) {
	merged := have.PCI
	for _, d := range c.PCI {
		if !have.HasDevice(d.RPUUID) {
			merged = append(merged, d)
		}
	}
	if len(merged) == len(have.PCI) {
		return false, nil
	}
	pci, _ := json.Marshal(merged)
	now := s.stamp()
	_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE claims SET pci = ?, updated_at = ?, last_message_id = ? WHERE id = ?`),
		string(pci), now, c.MessageID, have.ID)
	if err != nil {
		return false, err
	}
	// Indexed as of now, not the claim's creation: the device's newest
	// holder is the instance it was attached to last.
	return true, s.indexDevices(ctx, tx, have.ID, have.Host, now, merged[len(have.PCI):])
}

// ClaimsForInstance returns every claim (any state) of the instance on the
// host, oldest first.
func (s *Store) ClaimsForInstance(ctx context.Context, host, instance string) ([]Claim, error) {
	cs, err := s.queryClaims(ctx, s.r, `host = ? AND instance_uuid = ? ORDER BY created_at, resize_target, id`, host, instance)
	if err != nil {
		return nil, fmt.Errorf("claims: claims of instance %s on host %s: %w", instance, host, err)
	}
	return cs, nil
}

// LiveClaimHosts returns the hosts (sorted) that hold a live (active or
// dormant) claim of the instance. It reads across hosts, so it names every
// host involved only when all of them share this database (PostgreSQL);
// the dispatcher uses it to route a broadcast (bus.broadcast_routing).
func (s *Store) LiveClaimHosts(ctx context.Context, instance string) ([]string, error) {
	hosts, err := queryAll(ctx, s.r, s.d.rebind(`SELECT DISTINCT host FROM claims WHERE instance_uuid = ? AND state IN ('active', 'dormant') ORDER BY host`),
		func(sc scanner) (string, error) {
			var h string
			return h, sc.Scan(&h)
		}, instance)
	if err != nil {
		return nil, fmt.Errorf("claims: hosts with a live claim of instance %s: %w", instance, err)
	}
	return hosts, nil
}

// LiveClaims returns the host's active and dormant claims, oldest first.
func (s *Store) LiveClaims(ctx context.Context, host string) ([]Claim, error) {
	cs, err := s.queryClaims(ctx, s.r, `host = ? AND state IN ('active', 'dormant') ORDER BY created_at, id`, host)
	if err != nil {
		return nil, fmt.Errorf("claims: live claims on host %s: %w", host, err)
	}
	return cs, nil
}

// ActiveClaimForDevice returns the active claim holding the device, if
// any. A device with an active claim is in use: nothing may clean it.
func (s *Store) ActiveClaimForDevice(ctx context.Context, host, rpUUID string) (Claim, bool, error) {
	return s.claimForDevice(ctx, s.r, host, rpUUID, `c.state = 'active'`)
}

// LastClaimForDevice returns the most recent claim (any state) that held
// the device: the previous tenant a cleaning record names.
func (s *Store) LastClaimForDevice(ctx context.Context, host, rpUUID string) (Claim, bool, error) {
	return s.claimForDevice(ctx, s.r, host, rpUUID, `1 = 1`)
}

func (s *Store) claimForDevice(ctx context.Context, q querier, host, rpUUID, cond string) (Claim, bool, error) {
	// The device's newest claim, from claim_devices' index (cond is on
	// claims, aliased c): reading it costs the same with 10 or 10,000
	// claims in the host's history. HasDevice confirms it against the
	// claim's own device list.
	cs, err := s.queryClaims(ctx, q, `id IN (SELECT d.claim_id FROM claim_devices d JOIN claims c ON c.id = d.claim_id
		WHERE d.host = ? AND d.device_rp = ? AND `+cond+` ORDER BY d.created_at DESC, d.claim_id LIMIT 1)
		ORDER BY created_at DESC, id`, host, rpUUID)
	if err != nil {
		return Claim{}, false, fmt.Errorf("claims: claim of device %s on host %s: %w", rpUUID, host, err)
	}
	for _, c := range cs {
		if c.HasDevice(rpUUID) {
			return c, true, nil
		}
	}
	return Claim{}, false, nil
}
