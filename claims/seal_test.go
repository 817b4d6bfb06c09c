package claims

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func testSigner(t *testing.T) *Signer {
	t.Helper()
	s, _, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "keys", "record-signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSigningKeyCreatedOnceWithMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "record-signing.key")
	a, kf, err := LoadOrCreateKey(path)
	if err != nil || !kf.Created || !kf.PubWritten || kf.OldPub != "" {
		t.Fatalf("first start: %+v, %v", kf, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	b, kf, err := LoadOrCreateKey(path)
	if err != nil || kf.Created || kf.PubWritten || !a.PublicKey().Equal(b.PublicKey()) {
		t.Fatalf("second start: %+v, %v; want the same key loaded, its public key file left alone", kf, err)
	}
	pubPEM, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := ParsePublicKeyPEM(pubPEM)
	if err != nil || len(pubs) != 1 || !pubs[0].Equal(a.PublicKey()) {
		t.Fatalf("exported public key = %v, %v", pubs, err)
	}
	os.Chmod(path, 0o644)
	if _, _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
}

// A recreated key (removed, or refused for its mode and replaced) gets its
// own public key file: operators archive <key>.pub and verify with it, so a
// stale one would reject every new record. The old file is kept beside it.
func TestSigningKeyRecreatedRewritesPublicKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "record-signing.key")
	old, _, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	oldPEM, _ := os.ReadFile(path + ".pub")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	cur, kf, err := LoadOrCreateKey(path)
	if err != nil || !kf.Created || !kf.PubWritten || kf.OldKeyID != KeyID(old.PublicKey()) {
		t.Fatalf("recreated key: %+v, %v; want the public key file rewritten, naming the old key", kf, err)
	}
	if pubs, err := readPubKeys(path + ".pub"); err != nil || len(pubs) != 1 || !pubs[0].Equal(cur.PublicKey()) {
		t.Fatalf("%s.pub after the key was recreated = %v, %v; want the new key", path, pubs, err)
	}
	wantOld := path + ".pub." + strings.TrimPrefix(KeyID(old.PublicKey()), "sha256:")
	if kept, err := os.ReadFile(wantOld); kf.OldPub != wantOld || err != nil || !bytes.Equal(kept, oldPEM) {
		t.Fatalf("old public key kept at %q (%v); want %s with the old key", kf.OldPub, err, wantOld)
	}
	if fi, err := os.Stat(path + ".pub"); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("rewritten public key file: %v, %v; want mode 0644", fi, err)
	}
	// A public key file that does not parse is rewritten too, kept aside.
	if err := os.WriteFile(path+".pub", []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, kf, err := LoadOrCreateKey(path); err != nil || kf.Created || kf.OldPub != path+".pub.invalid" || kf.OldKeyID != "" {
		t.Fatalf("unparsable public key file: %+v, %v", kf, err)
	}
	if pubs, err := readPubKeys(path + ".pub"); err != nil || len(pubs) != 1 || !pubs[0].Equal(cur.PublicKey()) {
		t.Fatalf("%s.pub after it did not parse = %v, %v; want the key's", path, pubs, err)
	}
	if dir, _ := os.ReadDir(filepath.Dir(path)); len(dir) != 4 {
		t.Fatalf("state directory holds %d entries; want key, .pub, the old .pub and .pub.invalid (no temporary files)", len(dir))
	}
}

func readPubKeys(path string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePublicKeyPEM(data)
}

// closeThree closes three records of compute-1: quarantined, returned, and
// cleaned but not returned.
func closeThree(t *testing.T, s *Store) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i, state := range []RunState{RunQuarantined, RunReturned, RunCleaned} {
		rs := nvmeRun()
		rs.DeviceRP = "rp-" + string(rune('a'+i))
		run, _, err := s.OpenRun(ctx, rs)
		if err != nil {
			t.Fatal(err)
		}
		runStep(t, s, run.ID, "sanitize", false, StepOK, "done")
		switch state {
		case RunCleaned:
			err = s.FinishRun(ctx, run.ID, RunCleaned, "clean")
			if err == nil {
				err = s.CloseCleaned(ctx, run.ID, "Placement showed an allocation")
			}
		default:
			err = finish(ctx, s, run.ID, state, "verdict")
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	return ids
}

func TestSignedChainVerifies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		sg := testSigner(t)
		s := mustOpen(t, cfg, WithSigner(sg))
		if err := s.RegisterKey(ctx, "compute-1"); err != nil {
			t.Fatal(err)
		}
		ids := closeThree(t, s)
		rep, err := s.VerifyHost(ctx, "compute-1", nil)
		if err != nil || rep.Records != 3 || rep.FirstSeq["compute-1"] != 1 {
			t.Fatalf("VerifyHost = %+v, %v", rep, err)
		}
		if rep, err := s.VerifyDevice(ctx, "rp-b", nil); err != nil || rep.Records != 3 {
			t.Fatalf("VerifyDevice = %+v, %v", rep, err)
		}
		rec, err := s.Record(ctx, ids[1])
		if err != nil || rec.Signature == nil || rec.Chain == nil || rec.Chain.HostSeq != 2 || rec.Result.State != "returned" ||
			rec.Signature.KeyID != KeyID(sg.PublicKey()) {
			t.Fatalf("record 2 = %+v, %v", rec, err)
		}
		first, _ := s.Record(ctx, ids[0])
		if first.Chain.PrevRecordSHA256 != "" || rec.Chain.PrevRecordSHA256 != first.Signature.RecordSHA256 {
			t.Fatalf("chain links: first %+v, second %+v", first.Chain, rec.Chain)
		}

		// An export verifies on its own; one byte changed does not.
		doc, err := s.ExportJSON(ctx, ids[1])
		if err != nil {
			t.Fatal(err)
		}
		trusted := []ed25519.PublicKey{sg.PublicKey()}
		if _, err := VerifyDocument(doc, trusted); err != nil {
			t.Fatalf("exported record: %v", err)
		}
		changed := bytes.Replace(doc, []byte(`"returned"`), []byte(`"returnee"`), 1)
		if _, err := VerifyDocument(changed, trusted); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "changed after it was signed") {
			t.Fatalf("one byte changed: %v", err)
		}
		// Re-indenting or re-ordering does not matter: the canonical form does.
		var pretty bytes.Buffer
		json.Indent(&pretty, doc, "", "    ")
		if _, err := VerifyDocument(pretty.Bytes(), trusted); err != nil {
			t.Fatalf("re-indented export: %v", err)
		}
		// A file of the three, in any order, verifies with its links.
		var all []json.RawMessage
		for _, id := range []string{ids[2], ids[0], ids[1]} {
			d, _ := s.ExportJSON(ctx, id)
			all = append(all, d)
		}
		if rep, err := VerifyDocuments(all, func(string) ([]ed25519.PublicKey, error) { return trusted, nil }); err != nil || rep.Records != 3 {
			t.Fatalf("VerifyDocuments = %+v, %v", rep, err)
		}
	})
}

func TestChainBreaksAreNamed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg, WithSigner(testSigner(t)))
		s.RegisterKey(ctx, "compute-1")
		ids := closeThree(t, s)

		// A deleted record: the chain has a gap after record 1.
		if _, err := s.w.ExecContext(ctx, s.d.rebind(`DELETE FROM cleaning_runs WHERE id = ?`), ids[1]); err != nil {
			t.Fatal(err)
		}
		_, err := s.VerifyHost(ctx, "compute-1", nil)
		if !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "broken after record 1") || !strings.Contains(err.Error(), "records 2..2 were deleted") {
			t.Fatalf("deleted record: %v", err)
		}
	})
}

func TestForeignKeyAndUnsignedRecordsFail(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg, WithSigner(testSigner(t)))
		s.RegisterKey(ctx, "compute-1")
		closeThree(t, s)
		s.Close()

		// Someone with another key writes a record of compute-1.
		foreign := mustOpen(t, cfg, WithSigner(testSigner(t)))
		rs := nvmeRun()
		rs.DeviceRP = "rp-forged"
		run, _, _ := foreign.OpenRun(ctx, rs)
		if err := foreign.FinishRun(ctx, run.ID, RunQuarantined, "forged"); err != nil {
			t.Fatal(err)
		}
		_, err := foreign.VerifyHost(ctx, "compute-1", nil)
		if !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "record 4 of host compute-1") || !strings.Contains(err.Error(), "not a trusted key") {
			t.Fatalf("foreign key: %v", err)
		}
		foreign.Close()

		// And a record closed without any signature after signing began.
		unsigned := mustOpen(t, cfg)
		if _, err := unsigned.w.ExecContext(ctx, unsigned.d.rebind(`DELETE FROM cleaning_runs WHERE id = ?`), run.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		rs.DeviceRP = "rp-unsigned"
		run, _, _ = unsigned.OpenRun(ctx, rs)
		unsigned.FinishRun(ctx, run.ID, RunAborted, "")
		if _, err := unsigned.VerifyHost(ctx, "compute-1", nil); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "without a signature") {
			t.Fatalf("unsigned record after signing began: %v", err)
		}
	})
}

func TestRetentionPurgesUnexportedOnlyWhenTold(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		cfg.RecordRetention, cfg.PurgeUnexported = time.Hour, true
		s := mustOpen(t, cfg, WithClock(clock.Now))
		run, _, _ := s.OpenRun(ctx, nvmeRun())
		s.FinishRun(ctx, run.ID, RunFailed, "")
		clock.Advance(2 * time.Hour)
		if runs, _, err := s.Purge(ctx, "compute-1"); err != nil || runs != 1 {
			t.Fatalf("purge_unexported: Purge = %d, %v; want the unexported record purged", runs, err)
		}
	})
}

// TestCanonicalRecordEncoding pins the canonical JSON docs/claims.md
// documents for independent verifiers: Go's encoding/json, HTML
// characters and U+2028/U+2029 escaped, keys sorted by UTF-8 bytes,
// numbers as written, invalid UTF-8 as U+FFFD (its UTF-8 bytes, not an
// escape), no whitespace.
func TestCanonicalRecordEncoding(t *testing.T) {
	in := "{ \"signature\": {}, \"generated_at\": \"x\", \"schema_versions\": {},\n" +
		" \"z\": 1.0, \"é\": 1e3, \"a\": [true, null, {\"y\": \"\", \"b\": -0}],\n" +
		" \"out\": \"a<b & \\\"c\\\"\u2028\u2029\\u00e9/\\b\\f\\n\\r\\t\\u001b\x7f\\ud800\xff\\\\\", \"dup\": 1, \"dup\": 2 }"
	want := `{"a":[true,null,{"b":-0,"y":""}],"dup":2,` +
		`"out":"a\u003cb \u0026 \"c\"\u2028\u2029é/\b\f\n\r\t\u001b` + "\x7f\ufffd\ufffd" + `\\",` +
		`"z":1.0,"é":1e3}`
	got, err := CanonicalRecord([]byte(in))
	if err != nil || string(got) != want {
		t.Fatalf("CanonicalRecord = %s, %v\nwant             %s", got, err, want)
	}
}

// TestReplacedRowIsTampering: the seal triggers stop an UPDATE of a closed
// run, not a DELETE and an INSERT of an altered copy that keeps the
// signature columns. The signature still verifies, so verify must compare
// the row's columns with the signed record: records list, export selection
// and scourd read the columns.
func TestReplacedRowIsTampering(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg, WithSigner(testSigner(t)))
		s.RegisterKey(ctx, "compute-1")
		ids := closeThree(t, s) // ids[0] is quarantined
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`CREATE TEMP TABLE forged AS SELECT * FROM cleaning_runs WHERE id = ?`,
			`UPDATE forged SET state = 'returned', summary = 'all good', prev_project = 'someone-else', pipeline = 'other-pipeline'`,
			`DELETE FROM cleaning_steps WHERE run_id = ?`,
			`DELETE FROM cleaning_runs WHERE id = ?`,
			`INSERT INTO cleaning_runs SELECT * FROM forged`,
			`DROP TABLE forged`,
		} {
			var args []any
			if strings.Contains(q, "?") {
				args = append(args, ids[0])
			}
			if _, err := tx.ExecContext(ctx, s.d.rebind(q), args...); err != nil {
				tx.Rollback()
				t.Fatalf("%s: %v", q, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if run, err := s.GetRun(ctx, ids[0]); err != nil || run.State != RunReturned {
			t.Fatalf("forged row reads %+v, %v; want it to say returned", run, err)
		}
		_, err = s.VerifyHost(ctx, "compute-1", nil)
		if !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "run "+ids[0]) ||
			!strings.Contains(err.Error(), "state is returned in its row but quarantined in its signed record") ||
			!strings.Contains(err.Error(), `summary is "all good"`) || !strings.Contains(err.Error(), "steps is 0 in its row but 1") ||
			!strings.Contains(err.Error(), "prev_project is someone-else in its row") || !strings.Contains(err.Error(), "pipeline is other-pipeline in its row") {
			t.Fatalf("replaced row: %v", err)
		}
	})
}

// TestDeletedEndsOfChainAreNamed: deleting a host's oldest or newest
// records leaves no gap between the records left. The oldest left must be
// record 1 or follow the last one retention purged (record_purges); the
// newest is reported for comparison with an outside high-water mark.
func TestDeletedEndsOfChainAreNamed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		cfg.RecordRetention, cfg.PurgeUnexported = time.Hour, true
		s := mustOpen(t, cfg, WithClock(clock.Now), WithSigner(testSigner(t)))
		s.RegisterKey(ctx, "compute-1")
		clock.Advance(time.Minute)
		ids := closeThree(t, s)
		last, _ := s.GetRun(ctx, ids[2])
		rep, err := s.VerifyHost(ctx, "compute-1", nil)
		if err != nil || rep.LastSeq["compute-1"] != 3 || !rep.LastEnded["compute-1"].Equal(*last.EndedAt) {
			t.Fatalf("VerifyHost = %+v, %v; want newest record 3 closed at %v", rep, err, last.EndedAt)
		}
		del := func(id string) { t.Helper(); deleteRun(t, s, id) }

		// Retention purges records 1 and 2 and anchors the chain at 2.
		clock.Advance(2 * time.Hour)
		if n, _, err := s.Purge(ctx, "compute-1"); err != nil || n != 2 {
			t.Fatalf("Purge = %d, %v", n, err)
		}
		rep, err = s.VerifyHost(ctx, "compute-1", nil)
		if err != nil || rep.FirstSeq["compute-1"] != 3 || rep.PurgedThrough["compute-1"] != 2 || rep.LastSeq["compute-1"] != 3 {
			t.Fatalf("verify after purge = %+v, %v", rep, err)
		}
		ids = append(ids, closeThree(t, s)...) // records 4, 5, 6
		third, _ := s.seal(ctx, s.r, ids[2])
		// Deleting the oldest left (3) is caught against the anchor.
		del(ids[2])
		_, err = s.VerifyHost(ctx, "compute-1", nil)
		if !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "starts at record 4") || !strings.Contains(err.Error(), "purged up to record 2") {
			t.Fatalf("oldest record after a purge deleted: %v", err)
		}
		// Without the anchor, a chain not starting at record 1 fails.
		if _, err := s.w.ExecContext(ctx, `DELETE FROM record_purges`); err != nil {
			t.Fatal(err)
		}
		_, err = s.VerifyHost(ctx, "compute-1", nil)
		if !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "starts at record 4") || !strings.Contains(err.Error(), "records 1..3 were deleted") {
			t.Fatalf("oldest records deleted, no purge: %v", err)
		}
		// As if retention had purged 3: verifies again.
		if _, err := s.w.ExecContext(ctx, s.d.rebind(`INSERT INTO record_purges (host, last_seq, last_hash, purged_at) VALUES (?, 3, ?, '')`), "compute-1", third.Hash); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyHost(ctx, "compute-1", nil); err != nil {
			t.Fatalf("chain from record 4 after record 3 purged: %v", err)
		}
		// Deleting the newest (6) leaves no gap, but leaves the chain head
		// (record_heads) above the chain (issue 31 item 10).
		del(ids[5])
		if _, err := s.VerifyHost(ctx, "compute-1", nil); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "the newest records 6..6 were deleted") {
			t.Fatalf("newest record deleted: %v; want it named against the chain head", err)
		}
		// The next record does not reuse number 6: it is 7 and links to
		// 6's hash, so the deleted record stays a gap.
		seventh := closeThree(t, s)[0]
		if got, _ := s.seal(ctx, s.r, seventh); got.Seq != 7 {
			t.Fatalf("record closed after the newest was deleted is number %d; want 7 (a deleted number is never reused)", got.Seq)
		}
		if _, err := s.VerifyHost(ctx, "compute-1", nil); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "records 6..6 were deleted") {
			t.Fatalf("after the next records: %v; want the gap named", err)
		}
		// Lowering the head as well is caught against the chain...
		if _, err := s.w.ExecContext(ctx, s.d.rebind(`UPDATE record_heads SET last_seq = 5 WHERE host = ?`), "compute-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyHost(ctx, "compute-1", nil); !errors.Is(err, ErrTampered) {
			t.Fatalf("head lowered: %v", err)
		}
		// ...and deleting the head row too.
		if _, err := s.w.ExecContext(ctx, `DELETE FROM record_heads`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyHost(ctx, "compute-1", nil); !errors.Is(err, ErrTampered) {
			t.Fatalf("head deleted: %v", err)
		}

		// A forged unsigned row dated before the first signed record but
		// after the host registered its key.
		unsigned := mustOpen(t, cfg, WithClock(func() time.Time { return clock.Now().Add(-30 * time.Minute) }))
		rs := nvmeRun()
		rs.DeviceRP = "rp-forged"
		run, _, _ := unsigned.OpenRun(ctx, rs)
		if err := unsigned.FinishRun(ctx, run.ID, RunAborted, "forged"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyHost(ctx, "compute-1", nil); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "after the host registered its signing key") {
			t.Fatalf("unsigned row after the key's registration: %v", err)
		}
	})
}

// A store whose older scour already purged the oldest records (no anchor
// then) still verifies after the upgrade to record_purges: the migration
// anchors each host's chain where it starts.
func TestUpgradeAnchorsChainsPurgedBefore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now), WithSigner(testSigner(t)))
		s.RegisterKey(ctx, "compute-1")
		clock.Advance(time.Minute)
		ids := closeThree(t, s)
		// An older scour's retention: records 1 and 2 gone, no anchor,
		// and a store from before record_purges.
		for _, id := range ids[:2] {
			deleteRun(t, s, id)
		}
		dropTable(t, s, "record_purges")
		s.Close()
		s = mustOpen(t, cfg, WithClock(clock.Now), WithSigner(testSigner(t)))
		rep, err := s.VerifyHost(ctx, "compute-1", nil)
		if err != nil || rep.FirstSeq["compute-1"] != 3 || rep.PurgedThrough["compute-1"] != 2 {
			t.Fatalf("verify after the upgrade = %+v, %v; want the chain anchored at record 2", rep, err)
		}
	})
}

// A store from before record_heads gets each host's head from its newest
// signed record at the upgrade (sqlite and PostgreSQL): it verifies, and
// a newest record deleted after the upgrade is caught.
func TestUpgradeSetsChainHeads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		clock := newFakeClock()
		s := mustOpen(t, cfg, WithClock(clock.Now), WithSigner(testSigner(t)))
		s.RegisterKey(ctx, "compute-1")
		clock.Advance(time.Minute)
		ids := closeThree(t, s)
		dropTable(t, s, "record_heads")
		s.Close()
		s = mustOpen(t, cfg, WithClock(clock.Now), WithSigner(testSigner(t)))
		if v, _ := s.SchemaVersions(ctx); v["record_heads"] != 1 {
			t.Fatalf("record_heads version after the upgrade: %v", v)
		}
		head, ok, err := s.ChainHead(ctx, "compute-1")
		if err != nil || !ok || head.HostSeq != 3 || head.RunID != ids[2] {
			t.Fatalf("head after the upgrade = %+v, %v, %v; want record 3 (run %s)", head, ok, err, ids[2])
		}
		if _, err := s.VerifyHost(ctx, "compute-1", nil); err != nil {
			t.Fatalf("verify after the upgrade: %v", err)
		}
		deleteRun(t, s, ids[2])
		if _, err := s.VerifyHost(ctx, "compute-1", nil); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "the newest records 3..3 were deleted") {
			t.Fatalf("newest record deleted after the upgrade: %v", err)
		}
	})
}

// The public key file is kept as the operator left it when it holds the
// loaded key (alone or in a bundle with older keys); one that cannot be
// rewritten (a read-only directory, a Secret mount) does not stop signing:
// KeyFiles.PubErr says so for the log.
func TestPublicKeyFileBundleAndReadOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "record-signing.key")
	s, _, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(PublicKeyPEM(other.PublicKey()), PublicKeyPEM(s.PublicKey())...)
	if err := os.WriteFile(path+".pub", bundle, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, kf, err := LoadOrCreateKey(path); err != nil || kf.PubWritten || kf.PubErr != nil {
		t.Fatalf("bundle holding the key: %+v, %v; want it left alone", kf, err)
	}
	if got, _ := os.ReadFile(path + ".pub"); string(got) != string(bundle) {
		t.Error("the operator's bundle was rewritten")
	}
	// A .pub scourd cannot replace (here a directory in its place, which
	// even root cannot overwrite with a file; a read-only mount alike).
	if err := os.Remove(path + ".pub"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path+".pub", 0o755); err != nil {
		t.Fatal(err)
	}
	signer, kf, err := LoadOrCreateKey(path)
	if err != nil || signer == nil || !signer.PublicKey().Equal(s.PublicKey()) || kf.PubErr == nil {
		t.Fatalf("public key file that cannot be written: %+v, %v; want the signer and PubErr", kf, err)
	}
}

// dropTable removes a table and its schema version, making the store one
// from before that table.
func dropTable(t *testing.T, s *Store, table string) {
	t.Helper()
	for _, q := range []string{`DROP TABLE ` + table, `DELETE FROM scour_schema WHERE table_name = '` + table + `'`} {
		if _, err := s.w.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// deleteRun deletes a run and its steps behind the store's back, as
// someone with database access could (the seal triggers allow DELETE).
func deleteRun(t *testing.T, s *Store, id string) {
	t.Helper()
	for _, q := range []string{`DELETE FROM cleaning_steps WHERE run_id = ?`, `DELETE FROM cleaning_runs WHERE id = ?`} {
		if _, err := s.w.ExecContext(context.Background(), s.d.rebind(q), id); err != nil {
			t.Fatal(err)
		}
	}
}

// Each closed record's chain head is told after its commit, signed so an
// operator's log store can hold it (VerifyHead checks it); the first
// record of a host says it started a new chain.
func TestChainHeadIsToldSigned(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		sg := testSigner(t)
		var mu sync.Mutex
		var heads []ChainHead
		s := mustOpen(t, cfg, WithSigner(sg), WithChainHead(func(h ChainHead) { mu.Lock(); heads = append(heads, h); mu.Unlock() }))
		s.RegisterKey(ctx, "compute-1")
		ids := closeThree(t, s)
		mu.Lock()
		defer mu.Unlock()
		if len(heads) != 3 || !heads[0].NewChain || heads[1].NewChain || heads[2].HostSeq != 3 || heads[2].RunID != ids[2] {
			t.Fatalf("heads told = %+v; want records 1 (a new chain), 2, 3", heads)
		}
		doc, _ := json.Marshal(heads[2])
		h, err := VerifyHead(doc, []ed25519.PublicKey{sg.PublicKey()})
		if err != nil || h.HostSeq != 3 {
			t.Fatalf("VerifyHead = %+v, %v", h, err)
		}
		rec, _ := s.seal(ctx, s.r, ids[2])
		if h.RecordSHA256 != rec.Hash {
			t.Fatalf("head hash %s, record 3 hashes to %s", h.RecordSHA256, rec.Hash)
		}
		forged := strings.Replace(string(doc), `"host_seq":3`, `"host_seq":2`, 1)
		if _, err := VerifyHead([]byte(forged), []ed25519.PublicKey{sg.PublicKey()}); !errors.Is(err, ErrTampered) {
			t.Fatalf("altered head verifies: %v", err)
		}
	})
}
