package claims

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ChainHeadFormat names the chain head document.
const ChainHeadFormat = "scour.record-chain-head/v1"

// ChainHead is a host's chain head: its newest record's number and hash.
// scourd logs it, signed, each time a record closes, so the head leaves
// the host as it advances: an operator's log store then holds what the
// claims database can no longer deny (compare it with scourctl records
// verify; claims.VerifyHead checks its signature).
type ChainHead struct {
	Format       string    `json:"format"`
	Host         string    `json:"host"`
	HostSeq      int       `json:"host_seq"`
	RecordSHA256 string    `json:"record_sha256"`
	RunID        string    `json:"run_id"`
	At           time.Time `json:"at"` // when that record closed
	// NewChain: this record started the host's chain (record 1, no head
	// before it): a new host's first record, or a lost store.
	NewChain bool `json:"new_chain,omitempty"`
	// Signature is the host key's Ed25519 signature over the head's
	// canonical JSON (CanonicalRecord: without signature), whose SHA-256
	// is its record_sha256.
	Signature *RecordSignature `json:"signature,omitempty"`
}

// WithChainHead has the store call fn with the signed head of a host's
// chain after each transaction that advanced it commits (scourd logs it
// and sets a gauge). fn must not block.
func WithChainHead(fn func(ChainHead)) Option { return func(s *Store) { s.onHead = fn } }

// afterCommit keeps a head tx advanced, for its commit to tell.
func (s *Store) afterCommit(tx *sql.Tx, h ChainHead) {
	if s.onHead == nil {
		return
	}
	s.headMu.Lock()
	defer s.headMu.Unlock()
	if s.heads == nil {
		s.heads = map[*sql.Tx][]ChainHead{}
	}
	s.heads[tx] = append(s.heads[tx], h)
}

func (s *Store) takeHeads(tx *sql.Tx) []ChainHead {
	s.headMu.Lock()
	defer s.headMu.Unlock()
	h := s.heads[tx]
	delete(s.heads, tx)
	return h
}

// SignHead signs h with the store's key (h unchanged without a signer).
func (s *Store) SignHead(h ChainHead) ChainHead {
	h.Signature = nil
	if s.signer == nil {
		return h
	}
	raw, err := json.Marshal(h)
	if err != nil {
		return h
	}
	canon, err := CanonicalRecord(raw)
	if err != nil {
		return h
	}
	h.Signature = &RecordSignature{Algorithm: "ed25519", KeyID: KeyID(s.signer.pub), PublicKey: base64.StdEncoding.EncodeToString(s.signer.pub),
		RecordSHA256: sha256Hex(canon), Value: base64.StdEncoding.EncodeToString(ed25519.Sign(s.signer.priv, canon))}
	return h
}

// headRow is a host's row of record_heads.
type headRow struct {
	seq   int
	hash  string
	runID string
	at    string
}

func (s *Store) readHead(ctx context.Context, q querier, host, suffix string) (headRow, bool, error) {
	var h headRow
	err := q.QueryRowContext(ctx, s.d.rebind(`SELECT last_seq, last_hash, run_id, advanced_at FROM record_heads WHERE host = ?`+suffix), host).
		Scan(&h.seq, &h.hash, &h.runID, &h.at)
	if errors.Is(err, sql.ErrNoRows) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("claims: record chain head of host %s: %w", host, err)
	}
	return h, true, nil
}

// ChainHead returns host's chain head as the store holds it, signed with
// the store's key when it has one (ok false: the host closed no signed
// record).
func (s *Store) ChainHead(ctx context.Context, host string) (ChainHead, bool, error) {
	h, ok, err := s.readHead(ctx, s.r, host, "")
	if err != nil || !ok {
		return ChainHead{}, ok, err
	}
	at, _ := parseTS(h.at)
	return s.SignHead(ChainHead{Format: ChainHeadFormat, Host: host, HostSeq: h.seq, RecordSHA256: h.hash, RunID: h.runID, At: at}), true, nil
}

// VerifyHead checks a chain head document (as scourd logged it): its
// signature, by one of trusted.
func VerifyHead(doc []byte, trusted []ed25519.PublicKey) (ChainHead, error) {
	var h ChainHead
	if err := json.Unmarshal(doc, &h); err != nil || h.Format != ChainHeadFormat {
		return h, fmt.Errorf("%w: not a %s document: %v", ErrTampered, ChainHeadFormat, err)
	}
	where := fmt.Sprintf("chain head of host %s (record %d)", h.Host, h.HostSeq)
	if h.Signature == nil {
		return h, fmt.Errorf("%w: %s is not signed", ErrTampered, where)
	}
	canon, err := CanonicalRecord(doc)
	if err != nil {
		return h, fmt.Errorf("%w: %s: %v", ErrTampered, where, err)
	}
	if err := checkSignature(where, h.Host, canon, *h.Signature, trusted); err != nil {
		return h, err
	}
	return h, nil
}

// ParseHeadDocument reads a chain head as an operator keeps it: the head
// document itself, or the JSON log line scourd wrote it in (`record chain
// advanced`, `record chain head`: the document is its "head" field).
func ParseHeadDocument(data []byte) ([]byte, error) {
	var probe struct {
		Format string          `json:"format"`
		Head   json.RawMessage `json:"head"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not a %s document nor a scourd JSON log line holding one: %v", ChainHeadFormat, err)
	}
	if probe.Format != "" || len(probe.Head) == 0 {
		return data, nil
	}
	var doc string
	if err := json.Unmarshal(probe.Head, &doc); err == nil {
		return []byte(doc), nil
	}
	return probe.Head, nil // a log pipeline that kept the head as an object
}

// CheckHead checks that the records rep verified end at or extend past
// chain head h, a head kept outside the store (scourd logged it, signed;
// VerifyHead checks that): the record numbered h.HostSeq must be among
// them and hash to h.RecordSHA256. A chain ending below the head lost its
// newest records (deleted, with the store's own head lowered to match); a
// record of that number hashing otherwise was replaced. A head older than
// the records held (purged by retention, or not in an exported file)
// cannot be compared and is an error too, naming what to verify instead,
// except where retention purged it from the store (PurgedThrough): the
// chain then provably extends past it.
func (rep VerifyReport) CheckHead(h ChainHead) error {
	host := h.Host
	where := fmt.Sprintf("the chain head record %d of host %s (sha256 %s)", h.HostSeq, host, h.RecordSHA256)
	if h.RunID != "" {
		where = fmt.Sprintf("the chain head record %d of host %s (run %s, sha256 %s)", h.HostSeq, host, h.RunID, h.RecordSHA256)
	}
	last, ok := rep.LastSeq[host]
	if !ok {
		return fmt.Errorf("%w: no signed record of host %s was verified, but %s was logged: its records were deleted (or verify the host the head names)", ErrTampered, host, where)
	}
	if h.HostSeq > last {
		return fmt.Errorf("%w: the chain of host %s ends at record %d, below %s: records %d..%d were removed (truncated) after the head was logged",
			ErrTampered, host, last, where, last+1, h.HostSeq)
	}
	v, held := rep.hashes[host][h.HostSeq]
	switch {
	case !held && rep.PurgedThrough[host] >= h.HostSeq:
		return nil
	case !held:
		return fmt.Errorf("%w: %s is not among the verified records of the host (numbers %d..%d): verify the records from number %d on (export them with that record included)",
			ErrTampered, where, rep.FirstSeq[host], last, h.HostSeq)
	case !strings.EqualFold(v.Hash, h.RecordSHA256):
		return fmt.Errorf("%w: record %d of host %s (run %s) hashes to %s, but %s: the record, or the chain from it on, was replaced",
			ErrTampered, h.HostSeq, host, v.RunID, v.Hash, where)
	}
	return nil
}
