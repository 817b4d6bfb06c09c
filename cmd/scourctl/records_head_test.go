package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
)

// signedHead is compute-1's chain head as scourd logs it, signed with the
// key in dir.
func signedHead(t *testing.T, dir string) claims.ChainHead {
	t.Helper()
	s := openSignedStore(t, dir)
	defer s.Close()
	h, ok, err := s.ChainHead(context.Background(), "compute-1")
	if err != nil || !ok || h.Signature == nil {
		t.Fatalf("chain head: %+v %v %v", h, ok, err)
	}
	return h
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "head.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// records verify --head: the chain must reach a signed head kept outside
// the store. An insider who deletes the newest record and lowers the
// store's own head to match leaves a store that verifies alone; the head
// logged before catches it.
func TestRecordsVerifyHead(t *testing.T) {
	dir, runs := seedSignedStore(t)
	head := signedHead(t, dir)
	if head.HostSeq != 3 {
		t.Fatalf("head %+v, want record 3", head)
	}
	headFile := writeJSON(t, head)
	doc, _ := json.Marshal(head)
	logLine := writeJSON(t, map[string]any{"level": "INFO", "msg": "record chain advanced", "host": "compute-1", "head": string(doc)})
	verify := func(extra ...string) (int, string, string) {
		return recordsCLI(append([]string{"records", "verify", "--state-path", dir, "--host", "compute-1"}, extra...)...)
	}
	const warn = "WARN  --head without --pubkey is not conclusive"
	for _, h := range []string{headFile, logLine, fmt.Sprintf("3:%s", head.RecordSHA256)} {
		code, out, errs := verify("--head", h)
		if code != 0 || !strings.Contains(out, "the chain reaches the chain head record 3") {
			t.Fatalf("--head %s on the intact chain: exit %d, %q %q", h, code, out, errs)
		}
		// The store's own keys checked it: whoever writes the store
		// could have swapped them.
		if !strings.Contains(out, warn) || !strings.Contains(out, "--pubkey compute-1's key kept outside the store") {
			t.Errorf("--head %s without --pubkey: %q; want the WARN line", h, out)
		}
		code, out, errs = verify("--head", h, "--pubkey", filepath.Join(dir, "record-signing.key.pub"))
		if code != 0 || !strings.Contains(out, "the chain reaches the chain head record 3") || strings.Contains(out, "WARN") {
			t.Errorf("--head %s with --pubkey: exit %d, %q %q; want it to pass without a WARN", h, code, out, errs)
		}
	}
	if code, out, errs := recordsCLI("records", "verify", "--state-path", dir, "--device", "rp-0", "--head", "2:"+strings.Repeat("0", 64)); code != 1 || !strings.Contains(errs, "was replaced") {
		t.Fatalf("--head with another hash: exit %d, %q %q", code, out, errs)
	}
	// A head whose signature no longer covers it, or signed by a key not
	// the host's, is refused.
	forged := head
	forged.HostSeq = 2
	if code, _, errs := verify("--head", writeJSON(t, forged)); code != 1 || !strings.Contains(errs, "--head") {
		t.Fatalf("forged head: exit %d, %q", code, errs)
	}
	otherDir, _ := seedSignedStore(t)
	if code, _, errs := verify("--head", headFile, "--pubkey", filepath.Join(otherDir, "record-signing.key.pub")); code != 1 || !strings.Contains(errs, "not a trusted key") {
		t.Fatalf("head checked against a foreign key: exit %d, %q", code, errs)
	}

	// Truncation: record 3 deleted, the store's head lowered to record 2.
	code, exported, errs := recordsCLI("records", "export", "--state-path", dir, "--device", "rp-2", "--all")
	if code != 0 {
		t.Fatalf("export: %s", errs)
	}
	var recs []claims.Record
	if err := json.Unmarshal([]byte(exported), &recs); err != nil || len(recs) != 1 || recs[0].Chain == nil || recs[0].Chain.HostSeq != 3 {
		t.Fatalf("record 3: %v %+v", err, recs)
	}
	rec3 := recs[0]
	db, err := sql.Open("sqlite", filepath.Join(dir, "claims.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`DELETE FROM cleaning_runs WHERE id = ?`, []any{runs[2]}},
		{`UPDATE record_heads SET last_seq = 2, last_hash = ?, run_id = ? WHERE host = 'compute-1'`, []any{rec3.Chain.PrevRecordSHA256, runs[1]}},
	} {
		if _, err := db.Exec(q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if code, out, errs := verify(); code != 0 || !strings.Contains(out, "newest record 2") {
		t.Fatalf("the consistently truncated store alone: exit %d, %q %q; want it to verify (what --head is for)", code, out, errs)
	}
	code, _, errs = verify("--head", headFile)
	if code != 1 || !strings.Contains(errs, "ends at record 2") || !strings.Contains(errs, "records 3..3 were removed (truncated)") {
		t.Fatalf("truncated chain against the logged head: exit %d, %q", code, errs)
	}
	// An older head the chain extends past still passes.
	if code, out, errs := verify("--head", "2:"+rec3.Chain.PrevRecordSHA256); code != 0 {
		t.Fatalf("older head: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := verify("--head", "nonsense"); code == 0 || !strings.Contains(errs, "SEQ:SHA256") {
		t.Fatalf("bad --head: exit %d, %q", code, errs)
	}
}
