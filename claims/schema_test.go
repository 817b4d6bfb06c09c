package claims

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var generateV1 = flag.Bool("generate-v1-fixture", false, "rewrite testdata/v1.sqlite from the version-1 migrations")

const v1Fixture = "testdata/v1.sqlite"

var v1Versions = map[string]int{"claims": 1, "cleaning_runs": 1, "cleaning_steps": 1}

// v1Rows is what a version-1 scour wrote: two claims (one live, one
// released), a finished run with two steps and an unfinished run whose
// step was in flight.
var v1Rows = []string{
	`INSERT INTO claims (id, host, node, instance_uuid, project_id, user_id, vcpus, memory_mb, disk_gb, pci, resize_target, state, message_id, created_at, updated_at, released_at, release_reason)
	 VALUES ('c-live', 'compute-1', 'compute-1', 'inst-live', 'proj-a', 'user-a', 8, 16384, 80,
	 '[{"rp_uuid":"rp-gpu-0","rp_name":"compute-1_0000:3b:00.0","address":"0000:3b:00.0","resource_class":"CUSTOM_GPU_OTU"}]',
	 0, 'active', 'msg-1', '2025-06-01T10:00:00.000000Z', '2025-06-01T10:00:00.000000Z', NULL, '')`,
	`INSERT INTO claims (id, host, node, instance_uuid, project_id, user_id, vcpus, memory_mb, disk_gb, pci, resize_target, state, message_id, created_at, updated_at, released_at, release_reason)
	 VALUES ('c-old', 'compute-1', 'compute-1', 'inst-old', 'proj-b', 'user-b', 2, 4096, 20,
	 '[{"rp_uuid":"rp-nvme-0","address":"0000:81:00.0","resource_class":"CUSTOM_NVME_OTU"}]',
	 0, 'released', 'msg-2', '2025-05-01T10:00:00.000000Z', '2025-05-02T10:00:00.000000Z', '2025-05-02T10:00:00.000000Z', 'instance.delete.end')`,
	`INSERT INTO cleaning_runs (id, host, device_rp, address, serial, model, prev_instance, prev_project, pipeline, pipeline_version, triggered_by, state, summary, started_at, ended_at)
	 VALUES ('r-done', 'compute-1', 'rp-nvme-0', '0000:81:00.0', 'S4EV', 'PM1733', 'inst-old', 'proj-b', 'nvme-sanitize', '1', 'instance.delete.end msg-2',
	 'returned', 'clean', '2025-05-02T10:00:01.000000Z', '2025-05-02T10:20:00.000000Z')`,
	`INSERT INTO cleaning_steps (run_id, seq, name, attempt, started_at, ended_at, outcome, output)
	 VALUES ('r-done', 1, 'sanitize', 1, '2025-05-02T10:00:02.000000Z', '2025-05-02T10:15:00.000000Z', 'ok', 'sanitize complete')`,
	`INSERT INTO cleaning_steps (run_id, seq, name, attempt, started_at, ended_at, outcome, output)
	 VALUES ('r-done', 2, 'verify-zero', 1, '2025-05-02T10:15:01.000000Z', '2025-05-02T10:20:00.000000Z', 'ok', '0 non-zero blocks')`,
	`INSERT INTO cleaning_runs (id, host, device_rp, address, prev_instance, prev_project, pipeline, pipeline_version, triggered_by, state, started_at)
	 VALUES ('r-open', 'compute-1', 'rp-nvme-1', '0000:82:00.0', 'unknown', 'unknown', 'nvme-sanitize', '1', 'startup scan', 'running', '2025-06-02T08:00:00.000000Z')`,
	`INSERT INTO cleaning_steps (run_id, seq, name, attempt, started_at)
	 VALUES ('r-open', 1, 'sanitize', 1, '2025-06-02T08:00:01.000000Z')`,
}

// writeV1 creates a version-1 database with v1Rows through the real
// version-1 migrations.
func writeV1(t *testing.T, cfg Config) {
	t.Helper()
	s := mustOpen(t, cfg, withTargetVersions(v1Versions))
	for _, q := range v1Rows {
		if _, err := s.w.Exec(q); err != nil {
			t.Fatalf("v1 rows: %v\n%s", err, q)
		}
	}
	s.Close()
}

func sqliteSchema(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var s string
		rows.Scan(&s)
		b.WriteString(s + ";\n")
	}
	return b.String()
}

// TestV1FixtureMatchesV1Migrations proves the committed fixture is what
// the version-1 migrations create (so nobody edited a shipped migration),
// and rewrites it with -generate-v1-fixture.
func TestV1FixtureMatchesV1Migrations(t *testing.T) {
	cfg := Config{StatePath: t.TempDir()}
	writeV1(t, cfg)
	fresh := cfg.StatePath + "/" + DefaultClaimDB
	if *generateV1 {
		db, err := sql.Open("sqlite", "file:"+fresh)
		if err != nil {
			t.Fatal(err)
		}
		// Fold the WAL into the main file so the fixture is one file.
		if _, err := db.Exec(`PRAGMA journal_mode=DELETE`); err != nil {
			t.Fatal(err)
		}
		db.Close()
		copyFile(t, fresh, v1Fixture)
		t.Logf("wrote %s", v1Fixture)
	}
	if diff := cmp.Diff(sqliteSchema(t, v1Fixture), sqliteSchema(t, fresh)); diff != "" {
		t.Fatalf("the version-1 migrations no longer create the committed v1 schema (-fixture +migrations):\n%s", diff)
	}
	if strings.Contains(sqliteSchema(t, v1Fixture), "volumes") {
		t.Fatal("fixture already has v2 columns")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeFromV1 upgrades the committed sqlite v1 file, and a v1
// PostgreSQL schema made by the same migrations, and checks the data.
func TestUpgradeFromV1(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		if cfg.Driver == DriverSQLite {
			os.MkdirAll(cfg.StatePath, 0o700)
			copyFile(t, v1Fixture, filepath.Join(cfg.StatePath, DefaultClaimDB))
		} else {
			writeV1(t, cfg)
		}
		if _, err := Open(ctx, cfg, ReadOnlySchema()); !errors.Is(err, ErrSchemaTooOld) ||
			!strings.Contains(err.Error(), "claims is version 1, this binary needs 3") {
			t.Fatalf("read-only open of v1: %v, want ErrSchemaTooOld naming claims 1 -> 3", err)
		}
		s := mustOpen(t, cfg)
		v, err := s.SchemaVersions(ctx)
		if err != nil || !cmp.Equal(v, LatestVersions()) {
			t.Fatalf("versions after upgrade = %v, %v; want %v", v, err, LatestVersions())
		}
		live, _ := s.LiveClaims(ctx, "compute-1")
		if len(live) != 1 || live[0].ID != "c-live" || live[0].VCPUs != 8 || live[0].PCI[0].Address != "0000:3b:00.0" ||
			live[0].LastMessageID != "msg-1" || live[0].Volumes.Attached == nil || len(live[0].Volumes.Attached) != 0 {
			t.Fatalf("live claim after upgrade = %+v", live)
		}
		// v2 behaviour on v1 data: dormant claims are live, volumes work.
		if n, err := s.MarkDormant(ctx, "compute-1", "inst-live", "m"); err != nil || n != 1 {
			t.Fatalf("MarkDormant on upgraded claim = %d, %v", n, err)
		}
		replay := Claim{Host: "compute-1", InstanceUUID: "inst-live", PCI: live[0].PCI, MessageID: "msg-1"}
		if created, err := s.RecordClaim(ctx, replay); err != nil || created {
			t.Fatalf("replay onto dormant upgraded claim = %v, %v; want no new claim", created, err)
		}
		if err := s.UpdateVolumes(ctx, "compute-1", "inst-live", func(v *Volumes) error {
			v.Attached, v.RootDetached = []Volume{{ID: "vol-root", IsRoot: true}}, true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// claim_devices was filled from the claims already there.
		old, ok, _ := s.LastClaimForDevice(ctx, "compute-1", "rp-nvme-0")
		if !ok || old.State != ClaimReleased || old.ReleaseReason != "instance.delete.end" {
			t.Fatalf("released v1 claim = %+v %v", old, ok)
		}
		if c, ok, err := s.LastClaimForDevice(ctx, "compute-1", "rp-gpu-0"); err != nil || !ok || c.ID != "c-live" {
			t.Fatalf("claim of rp-gpu-0 after upgrade = %+v, %v, %v; want c-live", c, ok, err)
		}
		// The v1 run that was mid-step resumes; its open step is re-run.
		run, resumed, err := s.OpenRun(ctx, RunStart{Host: "compute-1", DeviceRP: "rp-nvme-1"})
		if err != nil || !resumed || run.ID != "r-open" {
			t.Fatalf("OpenRun on upgraded db = %+v, %v, %v", run, resumed, err)
		}
		st, err := s.StepStarted(ctx, StepStart{RunID: run.ID, Name: "sanitize"})
		if err != nil || st.Attempt != 2 {
			t.Fatalf("resumed step = %+v, %v", st, err)
		}
		rec, err := s.Record(ctx, "r-done")
		if err != nil || len(rec.Method.Steps) != 2 || rec.Result.State != "returned" || rec.Device.Serial != "S4EV" {
			t.Fatalf("record of v1 run = %+v, %v", rec, err)
		}
	})
}

func TestRefuseNewerSchema(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		if _, err := s.RecordClaim(ctx, gpuClaim("inst-n", "rp-a")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.w.Exec(`UPDATE scour_schema SET version = 99 WHERE table_name = 'claims'`); err != nil {
			t.Fatal(err)
		}
		s.Close()
		for _, opts := range [][]Option{nil, {ReadOnlySchema()}} {
			_, err := Open(ctx, cfg, opts...)
			if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), "claims is version 99, this binary knows up to 3") {
				t.Fatalf("Open of a newer database = %v; want ErrSchemaTooNew naming the versions", err)
			}
		}
		// Nothing was changed by the refused open.
		raw := mustOpenRaw(t, cfg)
		var v int
		if err := raw.QueryRow(`SELECT version FROM scour_schema WHERE table_name = 'claims'`).Scan(&v); err != nil || v != 99 {
			t.Fatalf("version after refused open = %d, %v", v, err)
		}
	})
}

// mustOpenRaw opens the database without the store.
func mustOpenRaw(t *testing.T, cfg Config) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if cfg.Driver == DriverPostgres {
		db, err = sql.Open("pgx", cfg.DSN)
	} else {
		db, err = sql.Open("sqlite", "file:"+filepath.Join(cfg.StatePath, DefaultClaimDB))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestReadOnlySchemaOnEmptyDatabase(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		want := "scour_schema"
		if cfg.Driver == DriverSQLite {
			want = "no claims database at"
		}
		if _, err := Open(context.Background(), cfg, ReadOnlySchema()); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("read-only open of an empty database = %v; want an error containing %q", err, want)
		}
		if cfg.Driver == DriverSQLite {
			if _, err := os.Stat(cfg.StatePath); !os.IsNotExist(err) {
				t.Fatalf("read-only open created %s (%v)", cfg.StatePath, err)
			}
		}
	})
}

// During a rolling upgrade on a shared PostgreSQL, a host still running a
// scour older than claim_devices records claims (and adds devices to
// claims) without indexing them; its new scourd indexes them at start
// (IndexClaimDevices), and only its own host's.
func TestIndexClaimDevicesCatchesUpOlderWriters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		if _, err := s.RecordClaim(ctx, gpuClaim("new-writer", "rp-a")); err != nil {
			t.Fatal(err)
		}
		// What an older scour writes: the claim row alone.
		for _, c := range []struct{ id, host, pci string }{
			{"old-1", "compute-1", `[{"rp_uuid":"rp-b","address":"0000:81:00.0"}]`},
			{"old-2", "compute-2", `[{"rp_uuid":"rp-c","address":"0000:81:00.0"}]`},
			{"old-3", "compute-1", `null`}, // names no device; must not fail the pass
		} {
			if _, err := s.w.ExecContext(ctx, s.d.rebind(`INSERT INTO claims (id, host, node, instance_uuid, pci, state, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, 'active', '2026-03-01T12:00:00.000000Z', '2026-03-01T12:00:00.000000Z')`),
				c.id, c.host, c.host, "inst-"+c.id, c.pci); err != nil {
				t.Fatal(err)
			}
		}
		// ... and adds a device to a claim a newer scour indexed.
		if _, err := s.w.ExecContext(ctx, s.d.rebind(`UPDATE claims SET pci = ? WHERE instance_uuid = ?`),
			`[{"rp_uuid":"rp-a","address":"0000:81:00.0"},{"rp_uuid":"rp-d","address":"0000:82:00.0"}]`, "new-writer"); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.ActiveClaimForDevice(ctx, "compute-1", "rp-b"); err != nil || ok {
			t.Fatalf("unindexed claim found before indexing: %v, %v", ok, err)
		}
		if n, err := s.IndexClaimDevices(ctx, "compute-1"); err != nil || n != 2 {
			t.Fatalf("IndexClaimDevices = %d, %v; want 2 (old-1's rp-b, new-writer's rp-d)", n, err)
		}
		if c, ok, err := s.ActiveClaimForDevice(ctx, "compute-1", "rp-d"); err != nil || !ok || c.InstanceUUID != "new-writer" {
			t.Fatalf("claim of rp-d after indexing = %+v, %v, %v", c, ok, err)
		}
		if c, ok, err := s.ActiveClaimForDevice(ctx, "compute-1", "rp-b"); err != nil || !ok || c.ID != "old-1" {
			t.Fatalf("claim of rp-b after indexing = %+v, %v, %v", c, ok, err)
		}
		if n, err := s.IndexClaimDevices(ctx, "compute-1"); err != nil || n != 0 {
			t.Fatalf("second IndexClaimDevices = %d, %v; want 0", n, err)
		}
		if _, ok, _ := s.ActiveClaimForDevice(ctx, "compute-2", "rp-c"); ok {
			t.Fatal("another host's claim was indexed")
		}
	})
}
