package claims

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// WithSigner makes the store sign every record it closes with the host's
// key and chain it to the host's previous record (scourd sets it; without
// it records close unsigned).
func WithSigner(sg *Signer) Option { return func(s *Store) { s.signer = sg } }

// unsignedKeys are the top-level record fields outside the signature.
var unsignedKeys = []string{"signature", "generated_at", "schema_versions"}

// CanonicalRecord returns the bytes a record's signature covers: the JSON
// document without its unsigned fields, numbers as written, object keys
// sorted, no insignificant space.
func CanonicalRecord(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("record is not a JSON object: %w", err)
	}
	for _, k := range unsignedKeys {
		delete(m, k)
	}
	return json.Marshal(m)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sealRow is a run's signature columns.
type sealRow struct {
	Seq       int
	Hash      string
	Signed    string // the canonical record as signed
	Signature string // base64
	KeyID     string
	PublicKey string // base64
}

func (s *Store) seal(ctx context.Context, q querier, runID string) (sealRow, error) {
	var r sealRow
	var seq sql.NullInt64
	err := q.QueryRowContext(ctx, s.d.rebind(`SELECT record_seq, record_hash, signed_record, signature, key_id, public_key
		FROM cleaning_runs WHERE id = ?`), runID).
		Scan(&seq, &r.Hash, &r.Signed, &r.Signature, &r.KeyID, &r.PublicKey)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNoRun
	}
	r.Seq = int(seq.Int64)
	return r, err
}

// document is the exported form of a signed record: the signed fields as
// signed, plus the signature and this export's own fields.
func (r sealRow) document(versions map[string]int, generated time.Time) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(r.Signed)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("signed record: %w", err)
	}
	m["signature"] = RecordSignature{Algorithm: "ed25519", KeyID: r.KeyID, PublicKey: r.PublicKey, RecordSHA256: r.Hash, Value: r.Signature}
	m["schema_versions"], m["generated_at"] = versions, generated
	return json.Marshal(m)
}

// closeRun ends a run with its final state in one UPDATE (a sealed row
// cannot be updated again): with a signer, the record is built from the
// final state, chained to the host's previous record, and signed in the
// same transaction, so no closed record of a signing host is unsigned.
func (s *Store) closeRun(ctx context.Context, tx *sql.Tx, run Run, state RunState, summary, now string) error {
	summary = boundOutput(summary)
	if s.signer == nil {
		_, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_runs SET state = ?, summary = ?, ended_at = ? WHERE id = ?`),
			string(state), summary, now, run.ID)
		return err
	}
	ended, _ := parseTS(now)
	run.State, run.Summary, run.EndedAt = state, summary, &ended
	var err error
	if run.Attempt, err = s.attempt(ctx, tx, run); err != nil {
		return err
	}
	steps, err := s.steps(ctx, tx, run.ID)
	if err != nil {
		return err
	}
	var prevSeq sql.NullInt64
	var prevHash string
	err = tx.QueryRowContext(ctx, s.d.rebind(`SELECT record_seq, record_hash FROM cleaning_runs
		WHERE host = ? AND record_seq IS NOT NULL ORDER BY record_seq DESC LIMIT 1`+s.d.forUpdate), run.Host).Scan(&prevSeq, &prevHash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	// The chain head (record_heads) is never lowered: when the newest
	// records were deleted behind the store's back, the next record still
	// takes the number after the head's and links to its hash, so numbers
	// are never reused and verify sees the deleted ones as a gap.
	head, headOK, err := s.readHead(ctx, tx, run.Host, s.d.forUpdate)
	if err != nil {
		return err
	}
	if headOK && head.seq >= int(prevSeq.Int64) {
		prevSeq, prevHash = sql.NullInt64{Int64: int64(head.seq), Valid: true}, head.hash
	}
	rec := buildRecord(run, steps)
	rec.Chain = &RecordChain{HostSeq: int(prevSeq.Int64) + 1, PrevRecordSHA256: prevHash}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	canon, err := CanonicalRecord(raw)
	if err != nil {
		return err
	}
	sig := ed25519.Sign(s.signer.priv, canon)
	hash := sha256Hex(canon)
	_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE cleaning_runs SET state = ?, summary = ?, ended_at = ?,
		record_seq = ?, record_hash = ?, signed_record = ?, signature = ?, key_id = ?, public_key = ? WHERE id = ?`),
		string(state), summary, now, rec.Chain.HostSeq, hash, string(canon),
		base64.StdEncoding.EncodeToString(sig), KeyID(s.signer.pub), base64.StdEncoding.EncodeToString(s.signer.pub), run.ID)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO record_heads (host, last_seq, last_hash, run_id, advanced_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (host) DO UPDATE SET last_seq = excluded.last_seq, last_hash = excluded.last_hash, run_id = excluded.run_id, advanced_at = excluded.advanced_at`),
		run.Host, rec.Chain.HostSeq, hash, run.ID, now); err != nil {
		return fmt.Errorf("advance the record chain head of host %s: %w", run.Host, err)
	}
	s.afterCommit(tx, ChainHead{Format: ChainHeadFormat, Host: run.Host, HostSeq: rec.Chain.HostSeq, RecordSHA256: hash, RunID: run.ID, At: ended,
		NewChain: rec.Chain.HostSeq == 1 && !headOK})
	return nil
}

// RegisterKey records the signer's public key as a key of host, so
// verifiers reading the store (scourctl records verify) trust it. scourd
// calls it at start.
func (s *Store) RegisterKey(ctx context.Context, host string) error {
	if s.signer == nil {
		return errors.New("claims: register record key: the store has no signer")
	}
	_, err := s.exec(ctx, `INSERT INTO record_keys (host, key_id, public_key, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (host, key_id) DO NOTHING`, host, KeyID(s.signer.pub), base64.StdEncoding.EncodeToString(s.signer.pub), s.stamp())
	if err != nil {
		return fmt.Errorf("claims: register record key of host %s: %w", host, err)
	}
	return nil
}

// HostKeys returns the record keys registered for host (all hosts when
// host is empty), by host.
func (s *Store) HostKeys(ctx context.Context, host string) (map[string][]ed25519.PublicKey, error) {
	q, args := `SELECT host, public_key FROM record_keys ORDER BY host, created_at`, []any{}
	if host != "" {
		q, args = `SELECT host, public_key FROM record_keys WHERE host = ? ORDER BY created_at`, []any{host}
	}
	rows, err := s.r.QueryContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("claims: record keys: %w", err)
	}
	defer rows.Close()
	out := map[string][]ed25519.PublicKey{}
	for rows.Next() {
		var h, b64 string
		if err := rows.Scan(&h, &b64); err != nil {
			return nil, err
		}
		pub, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("claims: record key of host %s is not an Ed25519 public key", h)
		}
		out[h] = append(out[h], ed25519.PublicKey(pub))
	}
	return out, rows.Err()
}
