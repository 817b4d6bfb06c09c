package claims

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// HostOpen is what one host name holds open in the store: what a scourd
// under that name acts on, and a scourd under any other name never sees
// (every row is keyed by host).
type HostOpen struct {
	Host string
	// Quarantines are open quarantines and retirements (rule 4).
	Quarantines int
	// Runs are cleaning runs not ended: running, or cleaned and waiting
	// for their un-reserve.
	Runs int
	// Claims are live claims (active or dormant): tenants on the
	// devices, whose cleaning records and re-fence name them.
	Claims int
	// Uncovered are devices whose last tenant under that name no clean
	// covered (a live or released claim, a seen holder, or the unknown
	// tenant a run closed as used after its clean stands for) and that
	// the asking name neither knows held nor cleaned since: their
	// re-fence and next record would miss that tenant.
	Uncovered int
	// Why says why the name is this scourd's own (the store is a sqlite
	// file of this machine, or its claims name this scourd's node).
	Why string
}

// openByHost counts each host's open quarantines, open runs and live
// claims (three parameters: the host to leave out).
const openByHost = `SELECT h, SUM(q), SUM(r), SUM(c) FROM (
		SELECT host AS h, 1 AS q, 0 AS r, 0 AS c FROM quarantines WHERE released_at IS NULL AND host <> ?
		UNION ALL SELECT host, 0, 1, 0 FROM cleaning_runs WHERE ended_at IS NULL AND host <> ?
		UNION ALL SELECT host, 0, 0, 1 FROM claims WHERE state IN ('active', 'dormant') AND host <> ?
	) x GROUP BY h ORDER BY h`

// tenantHosts lists the host names with a record of a device's tenant
// (a seen holder, a claim, a run closed as used after its clean), three
// parameters: the host to leave out.
const tenantHosts = `SELECT host FROM device_holders WHERE host <> ?
	UNION SELECT host FROM claim_devices WHERE host <> ?
	UNION SELECT host FROM cleaning_runs WHERE used_after_clean = 1 AND host <> ? ORDER BY 1`

// OpenUnderOtherNames lists the host names other than host that hold
// open records (HostOpen: open quarantines, runs, live claims, and
// devices whose tenant no clean covered that host does not know of) and
// are this machine's earlier names: every one in a sqlite store (one
// scourd at a time uses a state_path, so another name in it is one this
// state_path ran under), and in a PostgreSQL store (shared by a fleet) a
// name whose claims were recorded for one of nodes, the compute node
// this scourd's Placement tree is under. A name with no claim at all is
// not found there: nothing in the store ties its quarantines to a node.
func (s *Store) OpenUnderOtherNames(ctx context.Context, host string, nodes []string) ([]HostOpen, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(openByHost), host, host, host)
	if err != nil {
		return nil, fmt.Errorf("claims: look for other host names' open records: %w", err)
	}
	var all []HostOpen
	for rows.Next() {
		var h HostOpen
		if err := rows.Scan(&h.Host, &h.Quarantines, &h.Runs, &h.Claims); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claims: look for other host names' open records: %w", err)
		}
		all = append(all, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claims: look for other host names' open records: %w", err)
	}
	tenants, err := column(ctx, s.r, s.d.rebind(tenantHosts), host, host, host)
	if err != nil {
		return nil, fmt.Errorf("claims: look for other host names' tenants: %w", err)
	}
	for _, t := range tenants {
		if !slices.ContainsFunc(all, func(h HostOpen) bool { return h.Host == t }) {
			all = append(all, HostOpen{Host: t})
		}
	}
	slices.SortFunc(all, func(a, b HostOpen) int { return strings.Compare(a.Host, b.Host) })
	var out []HostOpen
	for _, h := range all {
		if s.d.name == DriverSQLite {
			h.Why = "the sqlite store " + s.cfg.SQLitePath() + " is this state_path's, so every host name in it is one scourd ran under here"
		} else {
			node, err := s.claimNode(ctx, h.Host, nodes)
			if err != nil {
				return nil, err
			}
			if node == "" {
				continue
			}
			h.Why = "its claims were recorded for Placement node " + node + ", this scourd's"
		}
		left, err := s.uncarried(ctx, s.r, h.Host, host)
		if err != nil {
			return nil, fmt.Errorf("claims: look for host %s's tenants no clean covered: %w", h.Host, err)
		}
		h.Uncovered = len(left)
		if h.Quarantines+h.Runs+h.Claims+h.Uncovered > 0 {
			out = append(out, h)
		}
	}
	return out, nil
}

// claimNode is the first of nodes that a claim of host was recorded for
// ("" when none).
func (s *Store) claimNode(ctx context.Context, host string, nodes []string) (string, error) {
	for _, n := range nodes {
		if n == "" {
			continue
		}
		var found bool
		if err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT EXISTS (SELECT 1 FROM claims WHERE host = ? AND node = ?)`),
			host, n).Scan(&found); err != nil {
			return "", fmt.Errorf("claims: look for host %s's claims on node %s: %w", host, n, err)
		}
		if found {
			return n, nil
		}
	}
	return "", nil
}

// Adopted is what AdoptHost moved (HostOpen: the open records moved,
// Uncovered the devices whose tenant no move carried, recorded held
// under the new name) and what it resolved where both names held one.
type Adopted struct {
	HostOpen
	// Superseded are from's open quarantines of devices to already held
	// open: closed under from, to's stands and its reason says from's.
	Superseded int
	// RunsSuperseded are from's open runs of devices to has an open run
	// of: closed under from, to's resumes. RunsUsed are those of them
	// closed as possibly used after their clean (an un-reserve PUT of
	// theirs may have landed: used_after_clean).
	RunsSuperseded, RunsUsed int
	// ClaimsMerged are from's live claims of instances to has a live
	// claim of: to's took the devices and volumes it lacked, from's was
	// released.
	ClaimsMerged int
	// Tenants are released claims and seen holders not covered by a clean
	// since (previous tenants, for the next clean's record and the
	// re-fence).
	Tenants int
}

// AdoptHost moves to host to what host from holds open, in one
// transaction: open quarantines and retirements, cleaning runs not
// ended (with their steps), live claims, and the previous tenants no
// clean has covered since (released claims and seen holders), with the
// devices' addresses, Cyborg ARQ records and delete tombstones. What a
// clean covered, and every closed record with from's signed chain, stays
// under from. It is for a host renamed (scourctl host adopt; scourd
// stopped): scourd under to then keeps from's quarantines, resumes its
// runs and knows its tenants.
//
// Where scourd already ran under to (a rename from before the start-up
// check), both names may hold one device or instance open; to's record
// stands and from's is closed under from, saying so, with nothing it
// kept lost:
//   - an open quarantine of a device to holds quarantined: to's takes
//     from's reason (said after its own) and, when it waits for no wipe,
//     from's retirement wipe;
//   - an open run of a device to has an open run of: from's ends
//     (superseded; a cleaned one as cleaned, not returned), and when its
//     PUT journal holds an un-reserve PUT that may have landed, as used
//     after its clean (CloseCleanedUsed), so its clean covers no tenant;
//   - a live claim of an instance to has a live claim of: to's takes the
//     devices (held since they joined from's) and volumes it lacks, and
//     from's is released.
//
// Last, a device whose tenant no clean of from's covers (PreviousTenant
// under from: a claim or holder, or the unknown tenant a run closed as
// used after its clean stands for) and that to neither knows held nor
// cleaned since is recorded held under to by that tenant, since it was
// known (uncarried): nothing from's tenants left on a device is lost to
// the new name's re-fence and records.
func (s *Store) AdoptHost(ctx context.Context, from, to, by string) (Adopted, error) {
	if from == "" || to == "" || from == to {
		return Adopted{}, fmt.Errorf("claims: adopt host %q as %q: two different host names needed", from, to)
	}
	var a Adopted
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		a = Adopted{HostOpen: HostOpen{Host: from}}
		now := s.stamp()
		var err error
		if a.Superseded, err = s.supersedeQuarantines(ctx, tx, from, to, by, now); err != nil {
			return err
		}
		if a.RunsSuperseded, a.RunsUsed, err = s.supersedeRuns(ctx, tx, from, to, now); err != nil {
			return err
		}
		// A clean covers a tenant known since before its run started
		// (lastCleanQuery; a run closed as possibly used after its clean
		// too: the unknown tenant it leaves is carried by uncarried);
		// cleanAfter is "no clean of from's covers the
		// tenant known since the time in the column given".
		cleanAfter := func(device, since string) string {
			return `NOT EXISTS (SELECT 1 FROM cleaning_runs r WHERE r.host = ? AND r.device_rp = ` + device +
				` AND r.state IN ('cleaned', 'returned') AND r.started_at >= ` + since + `)`
		}
		// Claims first: which ones move is read from claim_devices,
		// moved after them.
		if a.Tenants, err = execN(ctx, tx, s.d.rebind(`UPDATE claims SET host = ? WHERE host = ?
			AND state NOT IN ('active', 'dormant') AND EXISTS (SELECT 1 FROM claim_devices cd WHERE cd.claim_id = claims.id
			AND `+cleanAfter("cd.device_rp", `CASE WHEN claims.reactivated_at > cd.created_at THEN claims.reactivated_at ELSE cd.created_at END`)+`)`),
			to, from, from); err != nil {
			return err
		}
		// After the tenants: a claim released here stays under from.
		if a.ClaimsMerged, err = s.mergeClaims(ctx, tx, from, to, now); err != nil {
			return err
		}
		steps := []struct {
			n    *int
			q    string
			args []any
		}{
			{&a.Quarantines, `UPDATE quarantines SET host = ? WHERE host = ? AND released_at IS NULL`, []any{to, from}},
			{&a.Runs, `UPDATE cleaning_runs SET host = ? WHERE host = ? AND ended_at IS NULL`, []any{to, from}},
			{&a.Claims, `UPDATE claims SET host = ? WHERE host = ? AND state IN ('active', 'dormant')`, []any{to, from}},
			{nil, `UPDATE claim_devices SET host = ? WHERE host = ? AND claim_id IN (SELECT id FROM claims WHERE host = ?)`, []any{to, from, to}},
			{nil, `UPDATE device_holders SET host = ? WHERE host = ? AND ` + cleanAfter("device_holders.device_rp", "device_holders.seen_at") + `
				AND device_rp NOT IN (SELECT device_rp FROM device_holders WHERE host = ?)`, []any{to, from, from, to}},
			{nil, `UPDATE device_addresses SET host = ? WHERE host = ?
				AND device_rp NOT IN (SELECT device_rp FROM device_addresses WHERE host = ?)`, []any{to, from, to}},
			{nil, `UPDATE cyborg_arqs SET host = ? WHERE host = ? AND NOT EXISTS (SELECT 1 FROM cyborg_arqs b
				WHERE b.host = ? AND b.instance_uuid = cyborg_arqs.instance_uuid AND b.device_rp = cyborg_arqs.device_rp)`, []any{to, from, to}},
			{nil, `UPDATE deleted_instances SET host = ? WHERE host = ?
				AND instance_uuid NOT IN (SELECT instance_uuid FROM deleted_instances WHERE host = ?)`, []any{to, from, to}},
		}
		for _, st := range steps {
			n, err := execN(ctx, tx, s.d.rebind(st.q), st.args...)
			if err != nil {
				return err
			}
			if st.n != nil {
				*st.n = n
			}
		}
		left, err := s.uncarried(ctx, tx, from, to)
		if err != nil {
			return err
		}
		for _, u := range left {
			if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO device_holders (host, device_rp, consumer, seen_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (host, device_rp) DO UPDATE SET consumer = excluded.consumer, seen_at = excluded.seen_at`),
				to, u.DeviceRP, u.Instance, formatTS(u.Since)); err != nil {
				return err
			}
		}
		a.Uncovered = len(left)
		return nil
	})
	if err != nil {
		return Adopted{}, fmt.Errorf("claims: adopt host %s's open records as host %s: %w", from, to, err)
	}
	return a, nil
}

// supersedeQuarantines closes from's open quarantines of devices to
// holds quarantined open: to's stands, its reason saying from's (kind,
// since, reason) after its own, and it takes from's retirement wipe when
// it waits for none. It returns how many it closed.
func (s *Store) supersedeQuarantines(ctx context.Context, tx *sql.Tx, from, to, by, now string) (int, error) {
	type old struct{ rp, run, reason, at, wipe string }
	both, err := queryAll(ctx, tx, s.d.rebind(`SELECT f.device_rp, f.run_id, f.reason, f.quarantined_at, f.wipe FROM quarantines f
		JOIN quarantines t ON t.device_rp = f.device_rp AND t.host = ? AND t.released_at IS NULL
		WHERE f.host = ? AND f.released_at IS NULL ORDER BY f.device_rp`), func(sc scanner) (old, error) {
		var o old
		return o, sc.Scan(&o.rp, &o.run, &o.reason, &o.at, &o.wipe)
	}, to, from)
	if err != nil {
		return 0, err
	}
	for _, o := range both {
		kind := "retirement"
		if o.run != "" {
			kind = "quarantine (run " + o.run + ")"
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE quarantines SET reason = reason || ?,
			wipe = CASE WHEN wipe = '' THEN ? ELSE wipe END WHERE host = ? AND device_rp = ? AND released_at IS NULL`),
			boundOutput(fmt.Sprintf("; host %s's %s since %s, closed when %s adopted it: %s", from, kind, o.at, to, o.reason)),
			o.wipe, to, o.rp); err != nil {
			return 0, err
		}
	}
	return execN(ctx, tx, s.d.rebind(`UPDATE quarantines SET released_at = ?, released_by = ?,
		release_reason = ? WHERE host = ? AND released_at IS NULL
		AND device_rp IN (SELECT device_rp FROM quarantines WHERE host = ? AND released_at IS NULL)`),
		now, by, "host "+from+" adopted as "+to+", which holds its own open quarantine of the device (its reason now says this one's)", from, to)
}

// supersedeRuns closes, under from, from's open runs of devices to has
// an open run of (to's resumes): a running one as failed, a cleaned one
// as cleaned, not returned, and, when its PUT journal holds an un-reserve
// PUT that may have landed (the device may have served a tenant since its
// clean), as used after its clean (CloseCleanedUsed). It returns how
// many it closed, and how many of them as used.
func (s *Store) supersedeRuns(ctx context.Context, tx *sql.Tx, from, to, now string) (closed, used int, err error) {
	theirs, err := s.queryRuns(ctx, tx, `host = ? AND ended_at IS NULL`, to)
	if err != nil {
		return 0, 0, err
	}
	open := map[string]string{}
	for _, r := range theirs {
		open[r.DeviceRP] = r.ID
	}
	mine, err := s.queryRuns(ctx, tx, `host = ? AND ended_at IS NULL ORDER BY device_rp`+s.d.forUpdate, from)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range mine {
		stands, ok := open[r.DeviceRP]
		if !ok {
			continue
		}
		why := fmt.Sprintf("superseded: host %s adopted as %s, whose open run %s of the device stands", from, to, stands)
		if !r.AwaitingReturn() {
			err = s.closeRun(ctx, tx, r, RunFailed, why, now)
		} else {
			var pending bool
			if _, pending, err = s.lastPut(ctx, tx, r.ID); err != nil {
				return 0, 0, err
			}
			if pending {
				why += "; the device may have served a tenant since its clean, so this clean covers none"
				used++
			}
			err = s.closeCleanedUsed(ctx, tx, r, why, pending)
		}
		if err != nil {
			return 0, 0, err
		}
		closed++
	}
	return closed, used, nil
}

// mergeClaims resolves the instances both from and to hold a live claim
// of (same resize side): to's claim takes the devices from's names and
// it lacks (held since they joined from's claim) and the volumes it
// lacks, and from's is released as superseded. It returns how many.
func (s *Store) mergeClaims(ctx context.Context, tx *sql.Tx, from, to, now string) (int, error) {
	mine, err := s.queryClaims(ctx, tx, `host = ? AND state IN ('active', 'dormant') AND EXISTS (SELECT 1 FROM claims t
		WHERE t.host = ? AND t.instance_uuid = claims.instance_uuid AND t.resize_target = claims.resize_target
		AND t.state IN ('active', 'dormant')) ORDER BY instance_uuid, resize_target`+s.d.forUpdate, from, to)
	if err != nil {
		return 0, err
	}
	for _, f := range mine {
		theirs, err := s.queryClaims(ctx, tx, `host = ? AND instance_uuid = ? AND resize_target = ? AND state IN ('active', 'dormant')
			ORDER BY created_at, id`+s.d.forUpdate, to, f.InstanceUUID, boolInt(f.ResizeTarget))
		if err != nil {
			return 0, err
		}
		if len(theirs) == 0 {
			return 0, fmt.Errorf("host %s's live claim of instance %s went away meanwhile; retry", to, f.InstanceUUID)
		}
		t := theirs[0]
		pci := t.PCI
		for _, d := range f.PCI {
			if t.HasDevice(d.RPUUID) {
				continue
			}
			pci = append(pci, d)
			added, err := s.deviceAddedAt(ctx, tx, f.ID, d.RPUUID)
			if errors.Is(err, sql.ErrNoRows) {
				added, err = f.CreatedAt, nil // not indexed: held since the claim
			}
			if err != nil {
				return 0, fmt.Errorf("claim %s's device %s: %w", f.ID, d.RPUUID, err)
			}
			if err := s.indexDevices(ctx, tx, t.ID, to, formatTS(added), []PCIDevice{d}); err != nil {
				return 0, err
			}
		}
		vols := t.Volumes.Attached
		for _, v := range f.Volumes.Attached {
			if !slices.ContainsFunc(vols, func(w Volume) bool { return w.ID == v.ID }) {
				vols = append(vols, v)
			}
		}
		if pci == nil {
			pci = []PCIDevice{}
		}
		if vols == nil {
			vols = []Volume{}
		}
		pciJSON, _ := json.Marshal(pci)
		volJSON, _ := json.Marshal(vols)
		if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE claims SET pci = ?, volumes = ?,
			project_id = CASE WHEN project_id = '' THEN ? ELSE project_id END,
			user_id = CASE WHEN user_id = '' THEN ? ELSE user_id END, updated_at = ? WHERE id = ?`),
			string(pciJSON), string(volJSON), f.ProjectID, f.UserID, now, t.ID); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE claims SET state = 'released', released_at = ?, release_reason = ?, updated_at = ?
			WHERE id = ?`), now, fmt.Sprintf("superseded: host %s adopted as %s, whose live claim %s of the instance took its devices and volumes", from, to, t.ID),
			now, f.ID); err != nil {
			return 0, err
		}
	}
	return len(mine), nil
}

// uncarried lists the devices of host from whose last tenant no clean of
// from's covers (PreviousTenant under from: a claim, a seen holder, or
// the unknown tenant a run closed as used after its clean stands for)
// and that host to neither knows held (PreviousTenant under to) nor
// cleaned since that tenant was known: from's tenant, DeviceRP the
// provider under which it was known. The device is every provider seen
// at its address under from, and under to too: on one machine a PCI
// address is one slot.
func (s *Store) uncarried(ctx context.Context, q querier, from, to string) ([]Tenant, error) {
	rps, err := column(ctx, q, s.d.rebind(`SELECT device_rp FROM device_holders WHERE host = ?
		UNION SELECT device_rp FROM claim_devices WHERE host = ?
		UNION SELECT device_rp FROM cleaning_runs WHERE host = ? AND used_after_clean = 1 ORDER BY 1`), from, from, from)
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	var out []Tenant
	for _, rp := range rps {
		if done[rp] {
			continue
		}
		mine, err := s.aliases(ctx, q, from, rp)
		if err != nil {
			return nil, err
		}
		for _, m := range mine {
			done[m] = true
		}
		last, used, err := s.lastCleanOf(ctx, q, from, mine)
		if err != nil {
			return nil, err
		}
		t, held, err := s.tenantSince(ctx, q, from, mine, last, used)
		if err != nil || !held {
			if err != nil {
				return nil, err
			}
			continue
		}
		theirs := slices.Clone(mine)
		for _, m := range mine {
			at, err := column(ctx, q, s.d.rebind(`SELECT b.device_rp FROM device_addresses a JOIN device_addresses b
				ON b.host = ? AND b.address = a.address WHERE a.host IN (?, ?) AND a.device_rp = ? ORDER BY 1`), to, from, to, m)
			if err != nil {
				return nil, err
			}
			for _, b := range at {
				if !slices.Contains(theirs, b) {
					theirs = append(theirs, b)
				}
			}
		}
		last, used, err = s.lastCleanOf(ctx, q, to, theirs)
		if err != nil {
			return nil, err
		}
		if !t.Since.After(last) {
			continue // to cleaned the device since
		}
		if _, held, err := s.tenantSince(ctx, q, to, theirs, last, used); err != nil || held {
			if err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func execN(ctx context.Context, tx *sql.Tx, q string, args ...any) (int, error) {
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// column returns the one (text) column of q's rows (queryAll).
func column(ctx context.Context, db querier, q string, args ...any) ([]string, error) {
	return queryAll(ctx, db, q, func(sc scanner) (string, error) {
		var v string
		return v, sc.Scan(&v)
	}, args...)
}
