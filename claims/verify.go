package claims

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// ErrTampered means a record or the chain of records fails verification;
// the error names the first break.
var ErrTampered = errors.New("records fail verification")

// Verified is one record that passed its own checks.
type Verified struct {
	RunID, Host, Device, KeyID string
	Seq                        int
	Prev, Hash                 string
}

// VerifyDocument checks one exported record: its canonical form hashes to
// the signed hash, the signature verifies, and the signing key is one of
// trusted (a record re-signed with another key fails even though its own
// embedded key verifies it).
func VerifyDocument(doc []byte, trusted []ed25519.PublicKey) (Verified, error) {
	var head struct {
		RunID  string           `json:"run_id"`
		Host   string           `json:"host"`
		Device RecordDevice     `json:"device"`
		Chain  *RecordChain     `json:"chain"`
		Sig    *RecordSignature `json:"signature"`
	}
	if err := json.Unmarshal(doc, &head); err != nil {
		return Verified{}, fmt.Errorf("%w: not a cleaning record: %v", ErrTampered, err)
	}
	v := Verified{RunID: head.RunID, Host: head.Host, Device: head.Device.PCIAddress}
	where := fmt.Sprintf("record of run %s (host %s, device %s)", head.RunID, head.Host, head.Device.PCIAddress)
	sig := head.Sig
	if sig == nil || head.Chain == nil {
		return v, fmt.Errorf("%w: %s is not signed", ErrTampered, where)
	}
	v.Seq, v.Prev, v.KeyID = head.Chain.HostSeq, head.Chain.PrevRecordSHA256, sig.KeyID
	where = fmt.Sprintf("record %d of host %s (run %s, device %s)", v.Seq, v.Host, v.RunID, v.Device)
	canon, err := CanonicalRecord(doc)
	if err != nil {
		return v, fmt.Errorf("%w: %s: %v", ErrTampered, where, err)
	}
	v.Hash = sha256Hex(canon)
	return v, checkSignature(where, v.Host, canon, *sig, trusted)
}

// checkSignature checks a signed document's canonical form (canon)
// against its signature: the hash it covers, its embedded key, that key
// being one of trusted, and the Ed25519 signature.
func checkSignature(where, host string, canon []byte, sig RecordSignature, trusted []ed25519.PublicKey) error {
	if hash := sha256Hex(canon); hash != sig.RecordSHA256 {
		return fmt.Errorf("%w: %s was changed after it was signed: its content hashes to %s, the signature covers %s", ErrTampered, where, hash, sig.RecordSHA256)
	}
	pub, _ := base64.StdEncoding.DecodeString(sig.PublicKey)
	if len(pub) != ed25519.PublicKeySize || KeyID(pub) != sig.KeyID {
		return fmt.Errorf("%w: %s: its public key does not match key id %s", ErrTampered, where, sig.KeyID)
	}
	if !slices.ContainsFunc(trusted, func(k ed25519.PublicKey) bool { return k.Equal(ed25519.PublicKey(pub)) }) {
		return fmt.Errorf("%w: %s is signed by key %s, which is not a trusted key of host %s (give its key with --pubkey, or check who signed it)", ErrTampered, where, sig.KeyID, host)
	}
	value, err := base64.StdEncoding.DecodeString(sig.Value)
	if err != nil || !ed25519.Verify(pub, canon, value) {
		return fmt.Errorf("%w: %s: the signature does not verify", ErrTampered, where)
	}
	return nil
}

// checkLinks checks that each record links to the one before it in its
// host's chain (sorted by host and seq). contiguous requires every seq in
// between to be present: a gap is a deleted record.
func checkLinks(vs []Verified, contiguous bool) error {
	sort.Slice(vs, func(i, j int) bool {
		if vs[i].Host != vs[j].Host {
			return vs[i].Host < vs[j].Host
		}
		return vs[i].Seq < vs[j].Seq
	})
	for i := 1; i < len(vs); i++ {
		prev, cur := vs[i-1], vs[i]
		switch {
		case prev.Host != cur.Host:
		case cur.Seq == prev.Seq:
			return fmt.Errorf("%w: host %s has two records numbered %d (runs %s and %s)", ErrTampered, cur.Host, cur.Seq, prev.RunID, cur.RunID)
		case cur.Seq == prev.Seq+1 && cur.Prev != prev.Hash:
			return fmt.Errorf("%w: chain of host %s broken at record %d (run %s): it links to %s, but record %d (run %s) hashes to %s",
				ErrTampered, cur.Host, cur.Seq, cur.RunID, cur.Prev, prev.Seq, prev.RunID, prev.Hash)
		case cur.Seq != prev.Seq+1 && contiguous:
			return fmt.Errorf("%w: chain of host %s broken after record %d (run %s): the next record is %d (run %s); records %d..%d were deleted",
				ErrTampered, cur.Host, prev.Seq, prev.RunID, cur.Seq, cur.RunID, prev.Seq+1, cur.Seq-1)
		}
	}
	return nil
}

// VerifyReport is what a verification covered.
type VerifyReport struct {
	Records  int // signed records verified
	Unsigned int // closed records from before signing began
	Hosts    []string
	// FirstSeq of each host: earlier records were purged by retention
	// (exported first) or predate signing.
	FirstSeq map[string]int
	// LastSeq of each host: its newest record. Compare it (and LastEnded)
	// with a high-water mark kept outside the store: deleting the newest
	// records leaves no gap.
	LastSeq map[string]int
	// LastEnded of each host (store verification only): when its newest
	// record closed.
	LastEnded map[string]time.Time
	// PurgedThrough of each host (store verification only): retention
	// purged its records up to this number; the chain starts right after.
	PurgedThrough map[string]int
	// hashes of each host's verified records by number (CheckHead).
	hashes map[string]map[int]Verified
}

func newVerifyReport() VerifyReport {
	return VerifyReport{FirstSeq: map[string]int{}, LastSeq: map[string]int{}, LastEnded: map[string]time.Time{}, PurgedThrough: map[string]int{},
		hashes: map[string]map[int]Verified{}}
}

// VerifyDocuments checks records read from an export (a file): each one's
// signature against trusted(host), and the links between consecutive
// records of a host that the file holds.
func VerifyDocuments(docs []json.RawMessage, trusted func(host string) ([]ed25519.PublicKey, error)) (VerifyReport, error) {
	rep := newVerifyReport()
	var vs []Verified
	for _, d := range docs {
		var h struct {
			Host string `json:"host"`
		}
		_ = json.Unmarshal(d, &h)
		keys, err := trusted(h.Host)
		if err != nil {
			return rep, err
		}
		v, err := VerifyDocument(d, keys)
		if err != nil {
			return rep, err
		}
		vs = append(vs, v)
	}
	if err := checkLinks(vs, false); err != nil {
		return rep, err
	}
	return summarize(rep, vs), nil
}

func summarize(rep VerifyReport, vs []Verified) VerifyReport {
	rep.Records = len(vs)
	for _, v := range vs {
		if first, ok := rep.FirstSeq[v.Host]; !ok || v.Seq < first {
			rep.FirstSeq[v.Host] = v.Seq
		}
		if v.Seq > rep.LastSeq[v.Host] {
			rep.LastSeq[v.Host] = v.Seq
		}
		if !slices.Contains(rep.Hosts, v.Host) {
			rep.Hosts = append(rep.Hosts, v.Host)
		}
		if rep.hashes[v.Host] == nil {
			rep.hashes[v.Host] = map[int]Verified{}
		}
		rep.hashes[v.Host][v.Seq] = v
	}
	return rep
}

// VerifyHost checks every closed record of host in the store: each signed
// one as VerifyDocument does (against trusted, or the host's registered
// keys when trusted is nil), the chain without gaps from its first
// record, and that no record closed unsigned after signing began.
func (s *Store) VerifyHost(ctx context.Context, host string, trusted []ed25519.PublicKey) (VerifyReport, error) {
	rep := newVerifyReport()
	if trusted == nil {
		keys, err := s.HostKeys(ctx, host)
		if err != nil {
			return rep, err
		}
		trusted = keys[host]
	}
	runs, err := s.queryRuns(ctx, s.r, `host = ? AND ended_at IS NOT NULL ORDER BY ended_at, id`, host)
	if err != nil {
		return rep, fmt.Errorf("claims: verify records of host %s: %w", host, err)
	}
	var vs []Verified
	var firstSigned, lastEnded *time.Time
	var lastSeq int
	var unsigned []Run
	for _, r := range runs {
		seal, err := s.seal(ctx, s.r, r.ID)
		if err != nil {
			return rep, err
		}
		if seal.Signed == "" {
			unsigned = append(unsigned, r)
			continue
		}
		if firstSigned == nil {
			firstSigned = r.EndedAt
		}
		doc, err := seal.document(nil, time.Time{})
		if err != nil {
			return rep, err
		}
		v, err := VerifyDocument(doc, trusted)
		if err != nil {
			return rep, err
		}
		if v.RunID != r.ID || v.Seq != seal.Seq {
			return rep, fmt.Errorf("%w: run %s of host %s holds the signed record of run %s, number %d (stored as %d)", ErrTampered, r.ID, host, v.RunID, v.Seq, seal.Seq)
		}
		if err := s.rowMatchesSigned(ctx, r, v.Seq, seal.Signed); err != nil {
			return rep, err
		}
		if lastEnded == nil || v.Seq > lastSeq {
			lastSeq, lastEnded = v.Seq, r.EndedAt
		}
		vs = append(vs, v)
	}
	keyed, err := s.signingSince(ctx, host)
	if err != nil {
		return rep, err
	}
	for _, r := range unsigned {
		if firstSigned != nil && r.EndedAt.After(*firstSigned) {
			return rep, fmt.Errorf("%w: run %s of host %s (device %s) closed at %s without a signature, after signing began (tampering, or a scour from before signing was run on this store again)", ErrTampered, r.ID, host, r.Address, r.EndedAt.Format(time.RFC3339))
		}
		if keyed != nil && r.EndedAt.After(*keyed) {
			return rep, fmt.Errorf("%w: run %s of host %s (device %s) closed at %s without a signature, after the host registered its signing key (%s): scourd signs every record it closes from then on (tampering, or a scour from before signing was run on this store again)",
				ErrTampered, r.ID, host, r.Address, r.EndedAt.Format(time.RFC3339), keyed.Format(time.RFC3339))
		}
		rep.Unsigned++
	}
	if err := checkLinks(vs, true); err != nil {
		return rep, err
	}
	anchor, err := s.purgeAnchor(ctx, host)
	if err != nil {
		return rep, err
	}
	if err := checkChainStart(host, vs, anchor); err != nil {
		return rep, err
	}
	head, headOK, err := s.readHead(ctx, s.r, host, "")
	if err != nil {
		return rep, err
	}
	if err := checkChainEnd(host, vs, head, headOK); err != nil {
		return rep, err
	}
	rep = summarize(rep, vs)
	if lastEnded != nil {
		rep.LastEnded[host] = *lastEnded
	}
	if anchor != nil {
		rep.PurgedThrough[host] = anchor.seq
	}
	return rep, nil
}

// chainAnchor is where retention last cut a host's chain (record_purges).
type chainAnchor struct {
	seq  int
	hash string
}

func (s *Store) purgeAnchor(ctx context.Context, host string) (*chainAnchor, error) {
	var a chainAnchor
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT last_seq, last_hash FROM record_purges WHERE host = ?`), host).Scan(&a.seq, &a.hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claims: verify records of host %s: retention anchor: %w", host, err)
	}
	return &a, nil
}

// signingSince is when host registered its first record-signing key (nil
// when it has none): every record it closed after that is signed.
func (s *Store) signingSince(ctx context.Context, host string) (*time.Time, error) {
	var created sql.NullString
	if err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT MIN(created_at) FROM record_keys WHERE host = ?`), host).Scan(&created); err != nil {
		return nil, fmt.Errorf("claims: verify records of host %s: record keys: %w", host, err)
	}
	if !created.Valid {
		return nil, nil
	}
	t, err := parseTS(created.String)
	if err != nil {
		return nil, fmt.Errorf("claims: verify records of host %s: record key created_at %q: %w", host, created.String, err)
	}
	return &t, nil
}

// checkChainStart requires the host's first remaining signed record (vs
// sorted by seq) to be record 1, or to follow the last one retention
// purged: deleting the oldest records leaves no gap between those left.
func checkChainStart(host string, vs []Verified, anchor *chainAnchor) error {
	if len(vs) == 0 {
		if anchor != nil {
			return fmt.Errorf("%w: host %s has no signed record left, but retention purged only up to record %d and always keeps the newest: records from %d on were deleted",
				ErrTampered, host, anchor.seq, anchor.seq+1)
		}
		return nil
	}
	first := vs[0]
	if anchor == nil {
		if first.Seq != 1 || first.Prev != "" {
			return fmt.Errorf("%w: chain of host %s starts at record %d (run %s), and retention purged none: records 1..%d were deleted",
				ErrTampered, host, first.Seq, first.RunID, first.Seq-1)
		}
		return nil
	}
	if first.Seq != anchor.seq+1 || first.Prev != anchor.hash {
		return fmt.Errorf("%w: chain of host %s starts at record %d (run %s, linked to %q), but retention purged up to record %d (hash %s): the records after it were deleted or replaced",
			ErrTampered, host, first.Seq, first.RunID, first.Prev, anchor.seq, anchor.hash)
	}
	return nil
}

// checkChainEnd requires the host's newest signed record (vs sorted by
// seq) to be its chain head (record_heads), which closing a record
// advances in the same transaction and nothing lowers: deleting the
// newest records leaves no gap, but leaves the head above them.
func checkChainEnd(host string, vs []Verified, head headRow, headOK bool) error {
	switch {
	case !headOK && len(vs) == 0:
		return nil
	case !headOK:
		last := vs[len(vs)-1]
		return fmt.Errorf("%w: host %s has signed records up to %d (run %s) but no chain head in record_heads: the head was deleted (or a scour from before record_heads closed them after this store was upgraded); compare with the chain heads scourd logged",
			ErrTampered, host, last.Seq, last.RunID)
	case len(vs) == 0:
		return fmt.Errorf("%w: host %s's chain head is record %d (run %s), but no signed record of the host is left: records up to %d were deleted",
			ErrTampered, host, head.seq, head.runID, head.seq)
	}
	last := vs[len(vs)-1]
	switch {
	case last.Seq < head.seq:
		return fmt.Errorf("%w: chain of host %s ends at record %d (run %s), but its head is record %d (run %s, closed %s): the newest records %d..%d were deleted",
			ErrTampered, host, last.Seq, last.RunID, head.seq, head.runID, head.at, last.Seq+1, head.seq)
	case last.Seq > head.seq:
		return fmt.Errorf("%w: chain of host %s ends at record %d (run %s), above its head, record %d (run %s): the head was lowered (or a scour from before record_heads closed records after this store was upgraded); compare with the chain heads scourd logged",
			ErrTampered, host, last.Seq, last.RunID, head.seq, head.runID)
	case last.Hash != head.hash:
		return fmt.Errorf("%w: host %s's newest record %d (run %s) hashes to %s, but its chain head holds %s (run %s): the record or the head was replaced",
			ErrTampered, host, last.Seq, last.RunID, last.Hash, head.hash, head.runID)
	}
	return nil
}

// rowMatchesSigned checks that the run's own columns (and its step rows)
// say what its signed record says. The seal triggers stop an UPDATE of a
// closed run, not a DELETE and an INSERT of an altered copy that keeps the
// signature columns: the signature still verifies, while records list,
// export selection and scourd itself read the columns.
func (s *Store) rowMatchesSigned(ctx context.Context, r Run, seq int, signed string) error {
	var rec Record
	if err := json.Unmarshal([]byte(signed), &rec); err != nil {
		return fmt.Errorf("%w: record %d of host %s (run %s): signed record unreadable: %v", ErrTampered, seq, r.Host, r.ID, err)
	}
	steps, err := s.steps(ctx, s.r, r.ID)
	if err != nil {
		return fmt.Errorf("claims: verify steps of run %s: %w", r.ID, err)
	}
	row := buildRecord(r, steps)
	sameTime := func(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
	var diff []string
	check := func(field string, ok bool, got, want any) {
		if !ok {
			diff = append(diff, fmt.Sprintf("%s is %v in its row but %v in its signed record", field, got, want))
		}
	}
	check("host", row.Host == rec.Host, row.Host, rec.Host)
	check("device_rp", row.Device.ResourceProvider == rec.Device.ResourceProvider, row.Device.ResourceProvider, rec.Device.ResourceProvider)
	check("address", row.Device.PCIAddress == rec.Device.PCIAddress, row.Device.PCIAddress, rec.Device.PCIAddress)
	check("state", row.Result.State == rec.Result.State, row.Result.State, rec.Result.State)
	check("summary", row.Result.Summary == rec.Result.Summary, fmt.Sprintf("%q", row.Result.Summary), fmt.Sprintf("%q", rec.Result.Summary))
	check("started_at", row.StartedAt.Equal(rec.StartedAt), row.StartedAt.Format(time.RFC3339Nano), rec.StartedAt.Format(time.RFC3339Nano))
	check("ended_at", sameTime(row.EndedAt, rec.EndedAt), fmtTime(row.EndedAt), fmtTime(rec.EndedAt))
	check("prev_instance", row.PreviousTenant.InstanceUUID == rec.PreviousTenant.InstanceUUID, row.PreviousTenant.InstanceUUID, rec.PreviousTenant.InstanceUUID)
	check("prev_project", row.PreviousTenant.ProjectID == rec.PreviousTenant.ProjectID, row.PreviousTenant.ProjectID, rec.PreviousTenant.ProjectID)
	check("serial", row.Device.Serial == rec.Device.Serial, row.Device.Serial, rec.Device.Serial)
	check("model", row.Device.Model == rec.Device.Model, row.Device.Model, rec.Device.Model)
	check("profile", row.Method.Profile == rec.Method.Profile, row.Method.Profile, rec.Method.Profile)
	check("pipeline", row.Method.Pipeline == rec.Method.Pipeline, row.Method.Pipeline, rec.Method.Pipeline)
	check("pipeline_version", row.Method.PipelineVersion == rec.Method.PipelineVersion, row.Method.PipelineVersion, rec.Method.PipelineVersion)
	check("planned_steps", slices.Equal(row.Method.PlannedSteps, rec.Method.PlannedSteps), row.Method.PlannedSteps, rec.Method.PlannedSteps)
	check("triggered_by", row.TriggeredBy == rec.TriggeredBy, fmt.Sprintf("%q", row.TriggeredBy), fmt.Sprintf("%q", rec.TriggeredBy))
	check("steps", len(row.Method.Steps) == len(rec.Method.Steps), len(row.Method.Steps), len(rec.Method.Steps))
	for i := 0; i < len(row.Method.Steps) && i < len(rec.Method.Steps); i++ {
		a, b := row.Method.Steps[i], rec.Method.Steps[i]
		check(fmt.Sprintf("step %d", i+1), a.Seq == b.Seq && a.Name == b.Name && a.Attempt == b.Attempt && a.Outcome == b.Outcome,
			fmt.Sprintf("%s attempt %d %s", a.Name, a.Attempt, a.Outcome), fmt.Sprintf("%s attempt %d %s", b.Name, b.Attempt, b.Outcome))
	}
	if len(diff) > 0 {
		return fmt.Errorf("%w: run %s of host %s (record %d, device %s) was altered after it was signed: %s; its signed record is what happened (scourctl records show %s), and the row was replaced behind scour's back",
			ErrTampered, r.ID, r.Host, seq, rec.Device.PCIAddress, strings.Join(diff, "; "), r.ID)
	}
	return nil
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.Format(time.RFC3339Nano)
}

// VerifyDevice verifies the chains of every host that holds a record of
// the device (resource provider uuid or PCI address).
//
// trusted gives the keys to trust for each host (nil, or nil for a host:
// the keys that host registered in the store).
func (s *Store) VerifyDevice(ctx context.Context, device string, trusted func(host string) []ed25519.PublicKey) (VerifyReport, error) {
	runs, err := s.ListRuns(ctx, RunFilter{Device: device})
	if err != nil {
		return VerifyReport{}, err
	}
	total := newVerifyReport()
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.Host] {
			continue
		}
		seen[r.Host] = true
		var keys []ed25519.PublicKey
		if trusted != nil {
			keys = trusted(r.Host)
		}
		rep, err := s.VerifyHost(ctx, r.Host, keys)
		if err != nil {
			return total, err
		}
		total.Records += rep.Records
		total.Unsigned += rep.Unsigned
		total.Hosts = append(total.Hosts, r.Host)
		maps.Copy(total.FirstSeq, rep.FirstSeq)
		maps.Copy(total.LastSeq, rep.LastSeq)
		maps.Copy(total.LastEnded, rep.LastEnded)
		maps.Copy(total.PurgedThrough, rep.PurgedThrough)
		maps.Copy(total.hashes, rep.hashes)
	}
	if len(seen) == 0 {
		return total, fmt.Errorf("claims: no cleaning record of device %s", device)
	}
	return total, nil
}

// SplitDocuments reads one record, a JSON array of records, or a stream of
// records (what scourctl records export writes).
func SplitDocuments(data []byte) ([]json.RawMessage, error) {
	var out []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not JSON records: %w", err)
		}
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
			var arr []json.RawMessage
			if err := json.Unmarshal(raw, &arr); err != nil {
				return nil, err
			}
			out = append(out, arr...)
			continue
		}
		out = append(out, raw)
	}
	if len(out) == 0 {
		return nil, errors.New("no record in the input")
	}
	return out, nil
}
