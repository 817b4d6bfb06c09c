package claims

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// migration brings one table from version-1 to version. Migrations are
// applied in slice order, so a table referenced by a foreign key comes
// first. Never edit a shipped migration: add the next version instead (the
// v1 fixture in testdata proves the path from version 1 still works).
type migration struct {
	table   string
	version int
	stmts   []string
	// byDriver holds statements that differ per backend (triggers), run
	// after stmts.
	byDriver map[string][]string
}

var migrations = []migration{
	{table: "claims", version: 1, stmts: []string{
		`CREATE TABLE claims (
			id TEXT PRIMARY KEY,
			host TEXT NOT NULL,
			node TEXT NOT NULL DEFAULT '',
			instance_uuid TEXT NOT NULL,
			project_id TEXT NOT NULL DEFAULT '',
			user_id TEXT NOT NULL DEFAULT '',
			vcpus INTEGER NOT NULL DEFAULT 0,
			memory_mb INTEGER NOT NULL DEFAULT 0,
			disk_gb INTEGER NOT NULL DEFAULT 0,
			pci TEXT NOT NULL DEFAULT '[]',
			resize_target INTEGER NOT NULL DEFAULT 0,
			state TEXT NOT NULL,
			message_id TEXT NOT NULL DEFAULT '',
			created_at TEXT NOT NULL,
			updated_at TEXT NOT NULL,
			released_at TEXT,
			release_reason TEXT NOT NULL DEFAULT ''
		)`,
		`CREATE INDEX claims_host_instance ON claims (host, instance_uuid)`,
		`CREATE UNIQUE INDEX claims_live_key ON claims (host, instance_uuid, resize_target) WHERE state = 'active'`,
	}},
	{table: "cleaning_runs", version: 1, stmts: []string{
		`CREATE TABLE cleaning_runs (
			id TEXT PRIMARY KEY,
			host TEXT NOT NULL,
			device_rp TEXT NOT NULL,
			address TEXT NOT NULL DEFAULT '',
			serial TEXT NOT NULL DEFAULT '',
			model TEXT NOT NULL DEFAULT '',
			prev_instance TEXT NOT NULL DEFAULT 'unknown',
			prev_project TEXT NOT NULL DEFAULT 'unknown',
			pipeline TEXT NOT NULL DEFAULT '',
			pipeline_version TEXT NOT NULL DEFAULT '',
			triggered_by TEXT NOT NULL DEFAULT '',
			state TEXT NOT NULL,
			summary TEXT NOT NULL DEFAULT '',
			started_at TEXT NOT NULL,
			ended_at TEXT
		)`,
		// One unfinished run per device: a restart resumes it instead of
		// starting a second cleaning of the same device.
		`CREATE UNIQUE INDEX cleaning_runs_one_open ON cleaning_runs (host, device_rp) WHERE ended_at IS NULL`,
		`CREATE INDEX cleaning_runs_device ON cleaning_runs (device_rp)`,
		`CREATE INDEX cleaning_runs_address ON cleaning_runs (address)`,
	}},
	{table: "cleaning_steps", version: 1, stmts: []string{
		`CREATE TABLE cleaning_steps (
			run_id TEXT NOT NULL REFERENCES cleaning_runs (id) ON DELETE CASCADE,
			seq INTEGER NOT NULL,
			name TEXT NOT NULL,
			attempt INTEGER NOT NULL,
			started_at TEXT NOT NULL,
			ended_at TEXT,
			outcome TEXT NOT NULL DEFAULT '',
			output TEXT NOT NULL DEFAULT '',
			PRIMARY KEY (run_id, seq)
		)`,
	}},
	// v2: volumes and shelve (dormant) support; the live-claim key now
	// covers dormant claims so an unshelve cannot create a duplicate.
	{table: "claims", version: 2, stmts: []string{
		`ALTER TABLE claims ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]'`,
		`ALTER TABLE claims ADD COLUMN root_volume_detached INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE claims ADD COLUMN dormant_at TEXT`,
		`ALTER TABLE claims ADD COLUMN reactivated_at TEXT`,
		`ALTER TABLE claims ADD COLUMN last_message_id TEXT NOT NULL DEFAULT ''`,
		`UPDATE claims SET last_message_id = message_id`,
		`DROP INDEX claims_live_key`,
		`CREATE UNIQUE INDEX claims_live_key ON claims (host, instance_uuid, resize_target) WHERE state IN ('active', 'dormant')`,
	}},
	// v2: a finished run is sealed by the database itself, not only by
	// this code: any UPDATE of it fails (retention DELETE still works).
	{table: "cleaning_runs", version: 2, stmts: []string{
		// The pipeline engine compares the stored profile and step list
		// with its config to resume a run or close it as superseded.
		`ALTER TABLE cleaning_runs ADD COLUMN profile TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE cleaning_runs ADD COLUMN planned_steps TEXT NOT NULL DEFAULT '[]'`,
	}, byDriver: map[string][]string{
		DriverSQLite: {`CREATE TRIGGER cleaning_runs_sealed BEFORE UPDATE ON cleaning_runs
			WHEN OLD.ended_at IS NOT NULL
			BEGIN SELECT RAISE(ABORT, 'cleaning run is finished: its record is sealed'); END`},
		DriverPostgres: {
			`CREATE FUNCTION scour_run_sealed() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				RAISE EXCEPTION 'cleaning run % is finished: its record is sealed', OLD.id;
			END $$`,
			`CREATE TRIGGER cleaning_runs_sealed BEFORE UPDATE ON cleaning_runs
			FOR EACH ROW WHEN (OLD.ended_at IS NOT NULL) EXECUTE FUNCTION scour_run_sealed()`,
		},
	}},
	// v2: progress reporting, verification steps for the record, and no
	// step written to a sealed run.
	{table: "cleaning_steps", version: 2, stmts: []string{
		`ALTER TABLE cleaning_steps ADD COLUMN progress INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE cleaning_steps ADD COLUMN verification INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE cleaning_steps ADD COLUMN step_index INTEGER NOT NULL DEFAULT -1`,
		`ALTER TABLE cleaning_steps ADD COLUMN optional INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE cleaning_steps ADD COLUMN code INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE cleaning_steps ADD COLUMN details TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE cleaning_steps ADD COLUMN stderr TEXT NOT NULL DEFAULT ''`,
		`CREATE UNIQUE INDEX cleaning_steps_attempt ON cleaning_steps (run_id, name, attempt)`,
	}, byDriver: map[string][]string{
		DriverSQLite: {
			`CREATE TRIGGER cleaning_steps_sealed_insert BEFORE INSERT ON cleaning_steps
			WHEN (SELECT ended_at FROM cleaning_runs WHERE id = NEW.run_id) IS NOT NULL
			BEGIN SELECT RAISE(ABORT, 'cleaning run is finished: its record is sealed'); END`,
			`CREATE TRIGGER cleaning_steps_sealed_update BEFORE UPDATE ON cleaning_steps
			WHEN (SELECT ended_at FROM cleaning_runs WHERE id = OLD.run_id) IS NOT NULL
			BEGIN SELECT RAISE(ABORT, 'cleaning run is finished: its record is sealed'); END`,
		},
		DriverPostgres: {
			`CREATE FUNCTION scour_step_sealed() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF EXISTS (SELECT 1 FROM cleaning_runs WHERE id = NEW.run_id AND ended_at IS NOT NULL) THEN
					RAISE EXCEPTION 'cleaning run % is finished: its record is sealed', NEW.run_id;
				END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER cleaning_steps_sealed BEFORE INSERT OR UPDATE ON cleaning_steps
			FOR EACH ROW EXECUTE FUNCTION scour_step_sealed()`,
		},
	}},
	// v1 of quarantines: the store, not a Placement trait, is the authority
	// on a quarantine. A trait can be lost (a failed write, a crash between
	// the verdict and the write, an agent that rewrites the provider's
	// traits); an open row here keeps the device out of cleaning until an
	// operator releases it (scourctl placement unquarantine).
	{table: "quarantines", version: 1, stmts: []string{
		`CREATE TABLE quarantines (
			host TEXT NOT NULL,
			device_rp TEXT NOT NULL,
			address TEXT NOT NULL DEFAULT '',
			run_id TEXT NOT NULL DEFAULT '',
			reason TEXT NOT NULL DEFAULT '',
			quarantined_at TEXT NOT NULL,
			released_at TEXT,
			released_by TEXT NOT NULL DEFAULT '',
			release_reason TEXT NOT NULL DEFAULT ''
		)`,
		`CREATE UNIQUE INDEX quarantines_open ON quarantines (host, device_rp) WHERE released_at IS NULL`,
	}},
	// v3: a clean verdict no longer means returned. The run ends
	// "cleaned" (cleaned_at) and stays open until the un-reserve
	// succeeded, so a crash between the two resumes the same record
	// instead of writing a second one.
	{table: "cleaning_runs", version: 3, stmts: []string{
		// Older returned runs keep cleaned_at NULL: they are sealed, and
		// readers fall back to ended_at.
		`ALTER TABLE cleaning_runs ADD COLUMN cleaned_at TEXT`,
	}},
	// v1 of device_holders: the last consumer Placement showed holding
	// each device (from scans and burns), so a record names the real
	// previous tenant even when no notification announced it.
	{table: "device_holders", version: 1, stmts: []string{
		`CREATE TABLE device_holders (
			host TEXT NOT NULL,
			device_rp TEXT NOT NULL,
			consumer TEXT NOT NULL,
			seen_at TEXT NOT NULL,
			PRIMARY KEY (host, device_rp)
		)`,
	}},
	// v4: tamper evidence. A closed record is signed with the host's
	// Ed25519 key and chained to the host's previous record
	// (record_seq, and the previous record_hash inside signed_record, the
	// canonical document as signed).
	{table: "cleaning_runs", version: 4, stmts: []string{
		`ALTER TABLE cleaning_runs ADD COLUMN record_seq INTEGER`,
		`ALTER TABLE cleaning_runs ADD COLUMN record_hash TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE cleaning_runs ADD COLUMN signed_record TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE cleaning_runs ADD COLUMN signature TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE cleaning_runs ADD COLUMN key_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE cleaning_runs ADD COLUMN public_key TEXT NOT NULL DEFAULT ''`,
		`CREATE UNIQUE INDEX cleaning_runs_chain ON cleaning_runs (host, record_seq) WHERE record_seq IS NOT NULL`,
	}},
	// v1 of record_keys: each host's record-signing public keys, which
	// verifiers reading the store trust.
	{table: "record_keys", version: 1, stmts: []string{
		`CREATE TABLE record_keys (
			host TEXT NOT NULL,
			key_id TEXT NOT NULL,
			public_key TEXT NOT NULL,
			created_at TEXT NOT NULL,
			PRIMARY KEY (host, key_id)
		)`,
	}},
	// v1 of record_exports: which records left the store (scourctl
	// records export); retention purges only those unless told otherwise.
	{table: "record_exports", version: 1, stmts: []string{
		`CREATE TABLE record_exports (
			run_id TEXT PRIMARY KEY,
			exported_at TEXT NOT NULL
		)`,
	}},
	// v5: what a certificate of sanitization names besides the steps:
	// the media (JSON: make, firmware, kind, capacity), the category the
	// pipeline claims, and the scour version that ran the cleaning.
	{table: "cleaning_runs", version: 5, stmts: []string{
		`ALTER TABLE cleaning_runs ADD COLUMN media TEXT NOT NULL DEFAULT '{}'`,
		`ALTER TABLE cleaning_runs ADD COLUMN category TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE cleaning_runs ADD COLUMN scour_version TEXT NOT NULL DEFAULT ''`,
	}},
	// v3: the dispatcher asks which hosts hold a live claim of an instance
	// (LiveClaimHosts) to route a broadcast; claims_host_instance leads
	// with the host, so that question needs its own index.
	{table: "claims", version: 3, stmts: []string{
		`CREATE INDEX claims_live_instance ON claims (instance_uuid) WHERE state IN ('active', 'dormant')`,
	}},
	// v1 of claim_devices: which claim named which device. Every cleaning
	// reads its device's newest claim (the previous tenant); without this
	// the read scanned and decoded the host's whole claim history (8 ms
	// per cleaning at 11,000 claims). Filled from the existing claims.
	{table: "claim_devices", version: 1, stmts: []string{
		`CREATE TABLE claim_devices (
			claim_id TEXT NOT NULL,
			host TEXT NOT NULL,
			device_rp TEXT NOT NULL,
			created_at TEXT NOT NULL,
			PRIMARY KEY (claim_id, device_rp)
		)`,
		`CREATE INDEX claim_devices_device ON claim_devices (host, device_rp, created_at)`,
	}, byDriver: map[string][]string{
		DriverSQLite:   {indexClaimDevices[DriverSQLite]("1 = 1")},
		DriverPostgres: {indexClaimDevices[DriverPostgres]("1 = 1")},
	}},
	// v6: the un-reserve PUT journal (placement.PutJournal).
	// unreserve_journaled is set with the clean verdict by a scour that
	// journals its PUTs; unreserve_put_gen is then the provider generation
	// of the run's last un-reserve PUT that may have landed, written before
	// the PUT is sent (NULL: none). A cleaned run a scour without the
	// journal stored (before this version, or an older scourd still
	// running on a shared PostgreSQL during a rolling upgrade) may have
	// sent a PUT nobody wrote down: its device, if found reserved, is
	// cleaned again rather than returned on the old run's word.
	{table: "cleaning_runs", version: 6, stmts: []string{
		`ALTER TABLE cleaning_runs ADD COLUMN unreserve_journaled INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE cleaning_runs ADD COLUMN unreserve_put_gen INTEGER`,
	}},
	// v1 of record_purges: where retention cut each host's signed chain
	// (the last purged record's number and hash), written with the purge,
	// so verify can tell a purged oldest record from a deleted one. A host
	// whose chain already starts above 1 at this upgrade (purged by an
	// older scour) is anchored where it starts, purged_at '' (unknown).
	{table: "record_purges", version: 1, stmts: []string{
		`CREATE TABLE record_purges (
			host TEXT PRIMARY KEY,
			last_seq INTEGER NOT NULL,
			last_hash TEXT NOT NULL,
			purged_at TEXT NOT NULL
		)`,
	}, byDriver: map[string][]string{
		DriverSQLite:   {anchorPurgedChains("json_extract(c.signed_record, '$.chain.prev_record_sha256')")},
		DriverPostgres: {anchorPurgedChains("(c.signed_record::jsonb)->'chain'->>'prev_record_sha256'")},
	}},
	// v1 of record_heads: each host's chain head (its newest record's
	// number and hash), advanced in the transaction that closes a record
	// and never lowered, kept apart from cleaning_runs: deleting the
	// newest records does not lower the next number (it is never reused),
	// and verify compares the chain's newest record with it. Filled from
	// each host's newest signed record.
	{table: "record_heads", version: 1, stmts: []string{
		`CREATE TABLE record_heads (
			host TEXT PRIMARY KEY,
			last_seq INTEGER NOT NULL,
			last_hash TEXT NOT NULL,
			run_id TEXT NOT NULL,
			advanced_at TEXT NOT NULL
		)`,
		`INSERT INTO record_heads (host, last_seq, last_hash, run_id, advanced_at)
			SELECT c.host, c.record_seq, c.record_hash, c.id, COALESCE(c.ended_at, '') FROM cleaning_runs c
			WHERE c.record_seq IS NOT NULL AND c.record_seq = (SELECT MAX(x.record_seq) FROM cleaning_runs x
				WHERE x.host = c.host AND x.record_seq IS NOT NULL)`,
	}},
	// v1 of cyborg_arqs: which Cyborg device an instance was bound to,
	// read from its accelerator request at bind (Nova deletes the ARQs at
	// release), and whether the ARQ agreed with Placement and the host's
	// hardware (cyborg.go).
	{table: "cyborg_arqs", version: 1, stmts: []string{
		`CREATE TABLE cyborg_arqs (
			host TEXT NOT NULL,
			instance_uuid TEXT NOT NULL,
			device_rp TEXT NOT NULL,
			arq_uuid TEXT NOT NULL DEFAULT '',
			arq_device_rp TEXT NOT NULL DEFAULT '',
			arq_hostname TEXT NOT NULL DEFAULT '',
			attach_handle_type TEXT NOT NULL DEFAULT '',
			address TEXT NOT NULL DEFAULT '',
			result TEXT NOT NULL,
			detail TEXT NOT NULL DEFAULT '',
			recorded_at TEXT NOT NULL,
			PRIMARY KEY (host, instance_uuid, device_rp)
		)`,
	}},
	// v2 of quarantines: an operator's retirement of a device not cleaned
	// since its last tenant waits for its retirement wipe ("pending"), or
	// for the record of the operator's choice not to wipe it ("no-wipe"),
	// which a retirement run of the reconciler writes; '' once it did,
	// and for every other quarantine.
	{table: "quarantines", version: 2, stmts: []string{
		`ALTER TABLE quarantines ADD COLUMN wipe TEXT NOT NULL DEFAULT ''`,
	}},
	// v1 of deleted_instances: the instances whose delete this host
	// handled (deleted.go), so that a claim command handled at the same
	// time as the delete, or after it, records no claim (issue 33).
	{table: "deleted_instances", version: 1, stmts: []string{
		`CREATE TABLE deleted_instances (
			host TEXT NOT NULL,
			instance_uuid TEXT NOT NULL,
			message_id TEXT NOT NULL DEFAULT '',
			deleted_at TEXT NOT NULL,
			PRIMARY KEY (host, instance_uuid)
		)`,
		`CREATE INDEX deleted_instances_age ON deleted_instances (host, deleted_at)`,
	}},
	// v1 of device_addresses: the PCI address at which the scans saw
	// each device provider of the host's tree (from its name). What the
	// store knows of a device (its last tenant, its last clean, its open
	// quarantine) follows the device by (host, address) when Nova
	// re-creates its provider with a new UUID (lifecycle.md, "A re-created
	// provider"). Filled from the runs and quarantines that name one.
	{table: "device_addresses", version: 1, stmts: []string{
		`CREATE TABLE device_addresses (
			host TEXT NOT NULL,
			device_rp TEXT NOT NULL,
			address TEXT NOT NULL,
			seen_at TEXT NOT NULL,
			PRIMARY KEY (host, device_rp)
		)`,
		`CREATE INDEX device_addresses_address ON device_addresses (host, address)`,
		`INSERT INTO device_addresses (host, device_rp, address, seen_at)
			SELECT host, device_rp, MAX(address), MAX(started_at) FROM cleaning_runs
			WHERE address <> '' GROUP BY host, device_rp`,
		`INSERT INTO device_addresses (host, device_rp, address, seen_at)
			SELECT host, device_rp, MAX(address), MAX(quarantined_at) FROM quarantines q
			WHERE address <> '' AND NOT EXISTS (SELECT 1 FROM device_addresses a WHERE a.host = q.host AND a.device_rp = q.device_rp)
			GROUP BY host, device_rp`,
	}},
	// v7: clear_gen, the Placement provider generation of the all-clear
	// the run's first destructive attempt started on (NoteClearGeneration).
	// A resume compares it with the device's generation now. NULL: none
	// recorded (no destructive attempt yet, or a run stored before this
	// version): a resume that would keep a destructive step's outcome
	// starts over instead.
	{table: "cleaning_runs", version: 7, stmts: []string{
		`ALTER TABLE cleaning_runs ADD COLUMN clear_gen INTEGER`,
	}},
	// v8: used_after_clean, 1 on a cleaned run closed because its device
	// may have served a tenant after the run's clean that the store never
	// recorded (CloseCleanedUsed: a stale return, a re-fence while the run
	// went on, an allocation or an un-reserve by someone else found at the
	// un-reserve or the settle). Such a run covers the holders seen
	// before it, as any clean, and leaves an unknown tenant held for
	// PreviousTenant. Runs stored before this version read 0 (their clean
	// counts, as it did).
	{table: "cleaning_runs", version: 8, stmts: []string{
		`ALTER TABLE cleaning_runs ADD COLUMN used_after_clean INTEGER NOT NULL DEFAULT 0`,
	}},
}

// anchorPurgedChains is the statement that anchors every host whose signed
// chain starts above record 1, prevHash being the backend's expression for
// the first record's link (on cleaning_runs c).
func anchorPurgedChains(prevHash string) string {
	return `INSERT INTO record_purges (host, last_seq, last_hash, purged_at)
		SELECT c.host, c.record_seq - 1, COALESCE(` + prevHash + `, ''), '' FROM cleaning_runs c
		WHERE c.record_seq > 1 AND c.record_seq = (SELECT MIN(x.record_seq) FROM cleaning_runs x
			WHERE x.host = c.host AND x.record_seq IS NOT NULL)`
}

// indexClaimDevices is, per backend, the statement that adds to
// claim_devices each device of the claims matching cond (on claims c) that
// has no row there yet (a device an older scour added to a claim too). A
// pci column that is JSON but not a list (none should be) names no device
// rather than failing the upgrade. One that is not JSON at all fails it on
// PostgreSQL (15 has no way to test a text for JSON without a function);
// such a claim fails any read that returns it anyway (scanClaim).
var indexClaimDevices = map[string]func(cond string) string{
	DriverSQLite: func(cond string) string {
		return `INSERT OR IGNORE INTO claim_devices (claim_id, host, device_rp, created_at)
			SELECT c.id, c.host, json_extract(d.value, '$.rp_uuid'), c.created_at FROM claims c,
			json_each(CASE WHEN json_valid(c.pci) AND json_type(c.pci) = 'array' THEN c.pci ELSE '[]' END) d
			WHERE ` + cond + ` AND COALESCE(json_extract(d.value, '$.rp_uuid'), '') <> ''
			AND NOT EXISTS (SELECT 1 FROM claim_devices x WHERE x.claim_id = c.id AND x.device_rp = json_extract(d.value, '$.rp_uuid'))`
	},
	DriverPostgres: func(cond string) string {
		return `INSERT INTO claim_devices (claim_id, host, device_rp, created_at)
			SELECT c.id, c.host, d->>'rp_uuid', c.created_at FROM claims c,
			jsonb_array_elements(CASE WHEN jsonb_typeof(c.pci::jsonb) = 'array' THEN c.pci::jsonb ELSE '[]'::jsonb END) d
			WHERE ` + cond + ` AND COALESCE(d->>'rp_uuid', '') <> ''
			AND NOT EXISTS (SELECT 1 FROM claim_devices x WHERE x.claim_id = c.id AND x.device_rp = d->>'rp_uuid')
			ON CONFLICT DO NOTHING`
	},
}

// IndexClaimDevices adds to claim_devices the devices of the host's
// claims that are not there: claims an older scour recorded after a newer
// one had upgraded a shared PostgreSQL database (a rolling upgrade), or
// devices such a scour added to a claim. scourd calls it at start (it
// reads the host's claims once: about 30 ms for 10,000 on sqlite). It
// returns how many rows it added.
func (s *Store) IndexClaimDevices(ctx context.Context, host string) (int, error) {
	n, err := s.exec(ctx, indexClaimDevices[s.d.name](`c.host = ?`), host)
	if err != nil {
		return 0, fmt.Errorf("claims: index the devices of host %s's claims: %w", host, err)
	}
	return n, nil
}

// LatestVersions is the schema version of every managed table this binary
// knows.
func LatestVersions() map[string]int {
	v := map[string]int{}
	for _, m := range migrations {
		if m.version > v[m.table] {
			v[m.table] = m.version
		}
	}
	return v
}

// ErrSchemaTooNew means the database was written by a newer scour; this
// binary refuses to touch it. ErrSchemaTooOld means a read-only opener
// (scourctl) found a database that scourd has not upgraded yet.
var (
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	ErrSchemaTooOld = errors.New("database schema is older than this binary")
)

const schemaTable = `CREATE TABLE IF NOT EXISTS scour_schema (
	table_name TEXT PRIMARY KEY,
	version INTEGER NOT NULL,
	updated_at TEXT NOT NULL
)`

func readVersions(ctx context.Context, q querier) (map[string]int, error) {
	rows, err := q.QueryContext(ctx, `SELECT table_name, version FROM scour_schema`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	v := map[string]int{}
	for rows.Next() {
		var t string
		var n int
		if err := rows.Scan(&t, &n); err != nil {
			return nil, err
		}
		v[t] = n
	}
	return v, rows.Err()
}

// checkNotNewer names every table the database has at a version this
// binary does not know.
func checkNotNewer(have, known map[string]int) error {
	var bad []string
	for t, v := range have {
		if v > known[t] {
			bad = append(bad, fmt.Sprintf("%s is version %d, this binary knows up to %d", t, v, known[t]))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%w: %s; run a scour at least as new as the one that last wrote this database, or restore a backup",
		ErrSchemaTooNew, strings.Join(bad, "; "))
}

// migrate creates or upgrades the schema up to target, in one transaction.
func (s *Store) migrate(ctx context.Context, target map[string]int) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if s.d.name == DriverPostgres {
			// Several hosts may start at once against one central database.
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7366212)`); err != nil {
				return fmt.Errorf("lock schema: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, schemaTable); err != nil {
			return fmt.Errorf("create scour_schema: %w", err)
		}
		have, err := readVersions(ctx, tx)
		if err != nil {
			return fmt.Errorf("read scour_schema: %w", err)
		}
		if err := checkNotNewer(have, LatestVersions()); err != nil {
			return err
		}
		for _, m := range migrations {
			if m.version <= have[m.table] || m.version > target[m.table] {
				continue
			}
			if m.version != have[m.table]+1 {
				return fmt.Errorf("table %s is version %d, no migration to %d", m.table, have[m.table], have[m.table]+1)
			}
			for _, stmt := range slices.Concat(m.stmts, m.byDriver[s.d.name]) {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("upgrade %s to version %d: %w", m.table, m.version, err)
				}
			}
			if err := setVersion(ctx, tx, s.d, m.table, m.version, s.stamp()); err != nil {
				return err
			}
			s.log.InfoContext(ctx, "claims schema upgraded", "table", m.table, "version", m.version, "driver", s.d.name)
			have[m.table] = m.version
		}
		return nil
	})
}

func setVersion(ctx context.Context, tx *sql.Tx, d dialect, table string, version int, now string) error {
	_, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO scour_schema (table_name, version, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (table_name) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at`),
		table, version, now)
	if err != nil {
		return fmt.Errorf("record %s version %d: %w", table, version, err)
	}
	return nil
}

// checkCurrent is the read-only opener's check: the database must be at
// exactly this binary's versions.
func (s *Store) checkCurrent(ctx context.Context) error {
	have, err := readVersions(ctx, s.r)
	if err != nil {
		return fmt.Errorf("read scour_schema (is this a scour database?): %w", err)
	}
	known := LatestVersions()
	if err := checkNotNewer(have, known); err != nil {
		return err
	}
	var old []string
	for t, v := range known {
		if have[t] < v {
			old = append(old, fmt.Sprintf("%s is version %d, this binary needs %d", t, have[t], v))
		}
	}
	if len(old) > 0 {
		sort.Strings(old)
		return fmt.Errorf("%w: %s; start scourd once to upgrade it", ErrSchemaTooOld, strings.Join(old, "; "))
	}
	return nil
}

// SchemaVersions reads the version of every managed table.
func (s *Store) SchemaVersions(ctx context.Context) (map[string]int, error) {
	return readVersions(ctx, s.r)
}
