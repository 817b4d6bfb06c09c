package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/plugins"
)

// seedRecordsStore writes, through the real store, a finished cleaning of one
// device on two hosts' worth of runs and one cleaning in progress.
func seedRecordsStore(t *testing.T) (dir string, done string) {
	t.Helper()
	ctx := context.Background()
	dir = filepath.Join(t.TempDir(), "state")
	s, err := claims.Open(ctx, claims.Config{StatePath: dir}, claims.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	step := func(runID, name string, verify bool) {
		st, err := s.StepStarted(ctx, claims.StepStart{RunID: runID, Name: name, Verification: verify})
		var details map[string]any
		if verify { // a returned run's verification passed
			details = map[string]any{plugins.VerificationKey: plugins.Verification{Method: "read-back", BytesRead: 4096, Expected: "every byte 0x00", Result: plugins.VerifyPassed}.Map()}
		}
		if err == nil {
			err = s.StepFinished(ctx, runID, st.Seq, claims.StepResult{Outcome: claims.StepOK, Output: name + " output", Details: details})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	start := claims.RunStart{Host: "compute-1", DeviceRP: "rp-nvme-0", Address: "0000:81:00.0", Serial: "S4EV", Model: "PM1733",
		PrevInstance: "inst-1", PrevProject: "proj-a", Pipeline: "nvme-sanitize", PipelineVersion: "3", Trigger: "instance.delete.end"}
	for i := 0; i < 2; i++ {
		run, _, err := s.OpenRun(ctx, start)
		if err != nil {
			t.Fatal(err)
		}
		step(run.ID, "sanitize", false)
		step(run.ID, "verify-zero", true)
		if err := s.FinishRun(ctx, run.ID, claims.RunCleaned, "clean"); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkReturned(ctx, run.ID, "clean"); err != nil {
			t.Fatal(err)
		}
		done = run.ID
	}
	busy := start
	busy.DeviceRP, busy.Address = "rp-nvme-1", "0000:82:00.0"
	if _, _, err := s.OpenRun(ctx, busy); err != nil {
		t.Fatal(err)
	}
	return dir, done
}

func recordsCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRecordsExportByDevice(t *testing.T) {
	dir, newest := seedRecordsStore(t)
	for _, device := range []string{"rp-nvme-0", "0000:81:00.0"} {
		code, out, errs := recordsCLI("records", "export", "--state-path", dir, "--device", device)
		if code != 0 {
			t.Fatalf("export --device %s: exit %d: %s", device, code, errs)
		}
		rec, err := claims.ParseRecord([]byte(out))
		if err != nil {
			t.Fatalf("export output is not a record: %v\n%s", err, out)
		}
		if rec.RunID != newest || rec.Device.Serial != "S4EV" || rec.Result.State != "returned" || len(rec.Verification) != 1 ||
			rec.PreviousTenant.ProjectID != "proj-a" || len(rec.Method.Steps) != 2 {
			t.Fatalf("exported record = %+v; want the newest finished run %s", rec, newest)
		}
	}
	code, out, errs := recordsCLI("records", "export", "--state-path", dir, "--device", "rp-nvme-0", "--all")
	var all []claims.Record
	if code != 0 || json.Unmarshal([]byte(out), &all) != nil || len(all) != 2 || all[0].RunID != newest {
		t.Fatalf("export --all: exit %d, %d records, stderr %s", code, len(all), errs)
	}
	code, out, _ = recordsCLI("records", "export", "--state-path", dir, "--run", newest)
	if rec, err := claims.ParseRecord([]byte(out)); code != 0 || err != nil || rec.RunID != newest {
		t.Fatalf("export --run: exit %d, %v", code, err)
	}
}

func TestRecordsListShowAndErrors(t *testing.T) {
	dir, newest := seedRecordsStore(t)
	code, out, errs := recordsCLI("records", "list", "--state-path", dir)
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, newest) || !strings.Contains(out, "running") {
		t.Fatalf("list: exit %d stderr %q\n%s", code, errs, out)
	}
	code, out, _ = recordsCLI("records", "list", "--state-path", dir, "--state", "running")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "0000:82:00.0") {
		t.Fatalf("list --state running:\n%s", out)
	}
	code, out, _ = recordsCLI("records", "show", "--state-path", dir, newest)
	for _, want := range []string{"RETURNED clean", "sanitize", "verify-zero (verify)", "PM1733, serial S4EV", "instance inst-1, project proj-a"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("show lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"in progress only", []string{"export", "--state-path", dir, "--device", "rp-nvme-1"}, 1, "still open: run"},
		{"unknown device", []string{"export", "--state-path", dir, "--device", "rp-none"}, 1, "no finished cleaning record for device rp-none"},
		{"unknown run", []string{"show", "--state-path", dir, "nope"}, 1, "no such cleaning run"},
		{"both selectors", []string{"export", "--state-path", dir, "--run", "x", "--device", "y"}, 2, "exactly one of --run or --device"},
		{"no database", []string{"list", "--state-path", filepath.Join(dir, "missing")}, 1, "no claims database at"},
		{"bad flag", []string{"list", "--bogus"}, 2, "unknown flag: --bogus"},
		{"unknown subcommand", []string{"frobnicate"}, 2, `unknown command "frobnicate" for "scourctl records"`},
		{"no subcommand", nil, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := recordsCLI(append([]string{"records"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errs+out, tt.want) {
				t.Fatalf("exit %d (want %d), output %q %q; want %q", code, tt.code, out, errs, tt.want)
			}
		})
	}
}

// TestRecordsExportPostgres reads the central database through --dsn.
func TestRecordsExportPostgres(t *testing.T) {
	sdsn := testkit.PostgresSchema(t)

	ctx := context.Background()
	if _, _, errs := recordsCLI("records", "list", "--dsn", sdsn); !strings.Contains(errs, "scour_schema") {
		t.Fatalf("list on an empty database: %q; want it to refuse, naming scour_schema", errs)
	}
	s, err := claims.Open(ctx, claims.Config{Driver: claims.DriverPostgres, DSN: sdsn}, claims.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"compute-1", "compute-2"} {
		run, _, err := s.OpenRun(ctx, claims.RunStart{Host: host, DeviceRP: "rp-" + host, Address: "0000:81:00.0", Pipeline: "nvme"})
		if err == nil {
			err = s.FinishRun(ctx, run.ID, claims.RunQuarantined, "sanitize failed on "+host)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	code, _, errs := recordsCLI("records", "export", "--dsn", sdsn, "--device", "0000:81:00.0")
	if code != 2 || !strings.Contains(errs, "matches runs on 2 hosts; add --host") {
		t.Fatalf("ambiguous address: exit %d, %s", code, errs)
	}
	// With the central store, list shows every host's runs; --host narrows.
	code, out, errs := recordsCLI("records", "list", "--dsn", sdsn, "-c", "host", "-o", "value")
	if code != 0 || !strings.Contains(out, "compute-1") || !strings.Contains(out, "compute-2") {
		t.Fatalf("records list across hosts: exit %d, %q %q", code, out, errs)
	}
	if code, out, _ := recordsCLI("records", "list", "--dsn", sdsn, "--host", "compute-2", "-c", "host", "-o", "value"); code != 0 || strings.TrimSpace(out) != "compute-2" {
		t.Fatalf("records list --host compute-2: exit %d, %q", code, out)
	}
	code, out, errs = recordsCLI("records", "export", "--dsn", sdsn, "--device", "0000:81:00.0", "--host", "compute-2")
	rec, err := claims.ParseRecord([]byte(out))
	if code != 0 || err != nil || rec.Host != "compute-2" || rec.Result.Summary != "sanitize failed on compute-2" {
		t.Fatalf("export --host: exit %d, %v, %s", code, err, errs)
	}
}

// The backup command docs/operations.md gives takes a consistent copy
// while the store is open, and scourctl reads every record from the copy.
func TestRecordsBackupWhileOpen(t *testing.T) {
	sqlite3, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Fatal("sqlite3 is missing: make test installs it (scripts/ensure-debian-tools.sh sqlite3)")
	}
	dir, newest := seedRecordsStore(t)
	s, err := claims.Open(context.Background(), claims.Config{StatePath: dir}, claims.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// One more finished run, still in the WAL when the copy is taken.
	run, _, err := s.OpenRun(context.Background(), claims.RunStart{Host: "compute-1", DeviceRP: "rp-nvme-2", Address: "0000:83:00.0", Pipeline: "nvme"})
	if err == nil {
		err = s.FinishRun(context.Background(), run.ID, claims.RunQuarantined, "sanitize failed")
	}
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := os.ReadFile("../../docs/operations.md")
	if !strings.Contains(string(doc), `sqlite3 /var/lib/scour/claims.sqlite ".backup '`) {
		t.Fatal("docs/operations.md no longer shows the sqlite3 .backup command this test runs")
	}
	backup := t.TempDir()
	if out, err := exec.Command(sqlite3, filepath.Join(dir, claims.DefaultClaimDB), ".backup '"+filepath.Join(backup, "claims-copy.sqlite")+"'").CombinedOutput(); err != nil {
		t.Fatalf("sqlite3 .backup: %v\n%s", err, out)
	}
	code, out, errs := recordsCLI("records", "list", "--state-path", backup, "--db", "claims-copy.sqlite", "-o", "value", "-c", "run")
	if code != 0 || !strings.Contains(out, newest) || !strings.Contains(out, run.ID) || strings.Count(out, "\n") != 4 {
		t.Fatalf("records list on the copy: exit %d, stderr %q\n%s", code, errs, out)
	}
}

// A run exported while it is open (here: cleaned, waiting for its
// un-reserve) is not marked exported: retention keeps the final record it
// closes with, which never left the store.
func TestRecordsExportOpenRunNotMarked(t *testing.T) {
	ctx := context.Background()
	dir, _ := seedRecordsStore(t)
	clock := time.Now()
	s, err := claims.Open(ctx, claims.Config{StatePath: dir, RecordRetention: time.Hour},
		claims.WithLogger(slog.New(slog.DiscardHandler)), claims.WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := s.ListRuns(ctx, claims.RunFilter{Device: "rp-nvme-1"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("open run of rp-nvme-1: %+v, %v", runs, err)
	}
	open := runs[0].ID
	st, err := s.StepStarted(ctx, claims.StepStart{RunID: open, Name: "sanitize"})
	if err == nil {
		err = s.StepFinished(ctx, open, st.Seq, claims.StepResult{Outcome: claims.StepOK})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, open, claims.RunCleaned, "clean"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := recordsCLI("records", "export", "--state-path", dir, "--run", open)
	rec, err := claims.ParseRecord([]byte(out))
	if code != 0 || err != nil || rec.Result.State != "cleaned" {
		t.Fatalf("export of the open run: exit %d, %v, %s", code, err, errs)
	}
	if !strings.Contains(errs, "run "+open+" is not finished") || !strings.Contains(errs, "not marked exported") {
		t.Fatalf("export of the open run: stderr %q; want it to say the record is not final and not marked exported", errs)
	}
	if err := s.MarkReturned(ctx, open, "clean"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(48 * time.Hour)
	if _, _, err := s.Purge(ctx, "compute-1"); err != nil {
		t.Fatal(err)
	}
	if run, err := s.GetRun(ctx, open); err != nil || run.State != claims.RunReturned {
		t.Fatalf("final record of a run exported while open: %+v, %v; want it kept (never exported)", run, err)
	}
	// Exported once closed, it is marked, and retention may purge it.
	if code, _, errs := recordsCLI("records", "export", "--state-path", dir, "--run", open); code != 0 || errs != "" {
		t.Fatalf("export of the closed run: exit %d, %s", code, errs)
	}
	if _, _, err := s.Purge(ctx, "compute-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRun(ctx, open); !errors.Is(err, claims.ErrNoRun) {
		t.Fatalf("exported closed record not purged: %v", err)
	}
}
