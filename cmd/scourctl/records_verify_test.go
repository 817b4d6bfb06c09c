package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
)

// seedSignedStore closes three signed records of compute-1, as scourd
// does: key created at first start, registered, every close signed.
func seedSignedStore(t *testing.T) (dir string, runs []string) {
	t.Helper()
	ctx := context.Background()
	dir = filepath.Join(t.TempDir(), "state")
	s := openSignedStore(t, dir)
	defer s.Close()
	if err := s.RegisterKey(ctx, "compute-1"); err != nil {
		t.Fatal(err)
	}
	for _, rp := range []string{"rp-0", "rp-1", "rp-2"} {
		run, _, err := s.OpenRun(ctx, claims.RunStart{Host: "compute-1", DeviceRP: rp, Address: "0000:81:00.0", Pipeline: "nvme"})
		if err == nil {
			err = s.FinishRun(ctx, run.ID, claims.RunQuarantined, "sanitize failed on "+rp)
		}
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run.ID)
	}
	return dir, runs
}

// openSignedStore opens the store in dir as scourd does: with the
// signing key there (created on first use).
func openSignedStore(t *testing.T, dir string) *claims.Store {
	t.Helper()
	cfg := claims.Config{StatePath: dir}
	cfg.SetDefaults()
	sg, _, err := claims.LoadOrCreateKey(cfg.SigningKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	s, err := claims.Open(context.Background(), cfg, claims.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), claims.WithSigner(sg))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRecordsVerify(t *testing.T) {
	dir, runs := seedSignedStore(t)
	code, out, errs := recordsCLI("records", "verify", "--state-path", dir, "--host", "compute-1")
	if code != 0 || !strings.Contains(out, "OK: 3 signed records verified (compute-1 from record 1)") {
		t.Fatalf("verify --host on a good chain: exit %d, %q %q", code, out, errs)
	}
	code, out, errs = recordsCLI("records", "verify", "--state-path", dir, "--device", "rp-1")
	if code != 0 || !strings.Contains(out, "OK: 3 signed records") {
		t.Fatalf("verify --device: exit %d, %q %q", code, out, errs)
	}

	// An export verifies as a file, against the registered key or the
	// .pub file scourd wrote; one byte changed fails.
	code, exported, errs := recordsCLI("records", "export", "--state-path", dir, "--device", "rp-1", "--all")
	if code != 0 {
		t.Fatalf("export: exit %d %s", code, errs)
	}
	file := filepath.Join(t.TempDir(), "records.json")
	os.WriteFile(file, []byte(exported), 0o600)
	pub := filepath.Join(dir, "record-signing.key.pub")
	for _, extra := range [][]string{nil, {"--pubkey", pub}} {
		args := append([]string{"records", "verify", "--state-path", dir, "--file", file}, extra...)
		if code, out, errs := recordsCLI(args...); code != 0 || !strings.Contains(out, "OK: 1 signed records") {
			t.Fatalf("verify --file %v: exit %d, %q %q", extra, code, out, errs)
		}
	}
	os.WriteFile(file, bytes.Replace([]byte(exported), []byte("failed on rp-1"), []byte("failed on rp-7"), 1), 0o600)
	if code, _, errs := recordsCLI("records", "verify", "--state-path", dir, "--file", file); code != 1 || !strings.Contains(errs, "changed after it was signed") {
		t.Fatalf("one byte changed: exit %d, %q", code, errs)
	}

	// A foreign key: another host's key given as the only trusted one.
	otherDir, _ := seedSignedStore(t)
	os.WriteFile(file, []byte(exported), 0o600)
	code, _, errs = recordsCLI("records", "verify", "--state-path", dir, "--file", file, "--pubkey", filepath.Join(otherDir, "record-signing.key.pub"))
	if code != 1 || !strings.Contains(errs, "not a trusted key of host compute-1") {
		t.Fatalf("foreign key: exit %d, %q", code, errs)
	}
	// A key bound to its host (HOST=FILE) vouches for that host's records
	// only: the same key bound to another host does not.
	if code, out, errs := recordsCLI("records", "verify", "--state-path", dir, "--file", file, "--pubkey", "compute-1="+pub); code != 0 || !strings.Contains(out, "OK: 1 signed records") {
		t.Fatalf("key bound to its host: exit %d, %q %q", code, out, errs)
	}
	code, _, errs = recordsCLI("records", "verify", "--state-path", dir, "--file", file, "--pubkey", "compute-2="+pub)
	if code != 1 || !strings.Contains(errs, "not a trusted key of host compute-1") {
		t.Fatalf("key bound to another host: exit %d, %q", code, errs)
	}
	code, _, errs = recordsCLI("records", "verify", "--state-path", dir, "--host", "compute-1", "--pubkey", "compute-2="+pub)
	if code != 1 || !strings.Contains(errs, "not a trusted key of host compute-1") {
		t.Fatalf("store verify with a key bound to another host: exit %d, %q", code, errs)
	}
	code, out, _ = recordsCLI("records", "pubkey", "--state-path", dir)
	if keys, err := claims.ParsePublicKeyPEM([]byte(out)); code != 0 || err != nil || len(keys) != 1 {
		t.Fatalf("pubkey: exit %d, %v\n%s", code, err, out)
	}

	// A deleted record in the chain.
	db, err := sql.Open("sqlite", filepath.Join(dir, "claims.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM cleaning_runs WHERE id = ?`, runs[1]); err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, _, errs = recordsCLI("records", "verify", "--state-path", dir, "--host", "compute-1")
	if code != 1 || !strings.Contains(errs, "broken after record 1") {
		t.Fatalf("deleted record: exit %d, %q", code, errs)
	}
}

func TestRecordsExportHTML(t *testing.T) {
	dir, runs := seedSignedStore(t)
	code, out, errs := recordsCLI("records", "export", "--state-path", dir, "--run", runs[1], "--format", "html")
	if code != 0 {
		t.Fatalf("export --format html: exit %d: %s", code, errs)
	}
	_, js, _ := recordsCLI("records", "export", "--state-path", dir, "--run", runs[1])
	rec, err := claims.ParseRecord([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!DOCTYPE html>", "Certificate of sanitization", "0000:81:00.0", "QUARANTINED", "sanitize failed on rp-1",
		"number 2 of host compute-1", rec.Signature.KeyID, "sha256:" + rec.Chain.PrevRecordSHA256, "No verifying step ran"} {
		if !strings.Contains(out, want) {
			t.Errorf("HTML certificate lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := recordsCLI("records", "export", "--state-path", dir, "--run", runs[1], "--format", "pdf"); code != 2 || !strings.Contains(errs, "want json or html") {
		t.Errorf("--format pdf: exit %d %q", code, errs)
	}
}
