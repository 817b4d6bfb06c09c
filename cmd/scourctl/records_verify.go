package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/claims"
)

type recordsVerifyFlags struct {
	host, device, file string
	head               string
	pubkeys            []string
}

func newRecordsVerify(sf *recordsStoreFlags, stdout io.Writer) *cobra.Command {
	var f recordsVerifyFlags
	cmd := &cobra.Command{
		Use:   "verify (--host H | --device RP-OR-ADDRESS | --file RECORDS.json) [--pubkey KEY.pub]... [--head HEAD.json | --head SEQ:SHA256]",
		Short: "check the signatures and the chain of cleaning records; names the first break",
		Long: `Checks cleaning records: each record's Ed25519 signature, that its key is
the host's, and the chain (every record carries the hash of its host's
previous one, so a changed, deleted or foreign record breaks it).

--host and --device check the store's records of the host (or of every host
holding a record of the device), from the first record on; --file checks
exported records (one, an array, or several documents) and the links
between consecutive records it holds. Trusted keys: each --pubkey file (PEM,
as scourd writes it next to its key, or scourctl records pubkey prints),
else the keys the hosts registered in the store. --pubkey HOST=FILE trusts
FILE's keys for HOST's records only; a plain --pubkey FILE is trusted for
every host's records, so when records of several hosts are verified
together, bind each key to its host (a key of host A must not vouch for a
record that says host B). Exit status 1 and the first break on failure.

--head checks that the chain ends at or extends past a chain head kept
outside the store: HEAD.json is the signed head document scourd logged
(record chain advanced: the log line's "head" field, or the whole JSON log
line), whose signature is checked with the trusted keys above; SEQ:SHA256
is a head's number and record_sha256 as written down (unsigned: you vouch
for it; with --device or --file it needs the records of one host). The
record of that number must be among those verified and hash to the head's
value: a chain ending below it had its newest records removed (truncation,
even with the store's own head lowered to match), a record hashing
otherwise was replaced. Use the newest head in your log store.

--head is conclusive only with --pubkey, the host's key kept outside the
store (scourctl records pubkey, saved when the host was set up): without
it the head's signature and the records are checked with the keys
registered in the store, which whoever can write the store can replace
with their own, re-signing what they like. verify then prints a WARN
line.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return recordsVerify(cmd.Context(), sf, f, stdout)
		},
	}
	cmd.Flags().StringVar(&f.host, "host", "", "verify this host's chain in the store")
	cmd.Flags().StringVar(&f.device, "device", "", "verify the chains holding this device's records")
	cmd.Flags().StringVar(&f.file, "file", "", "verify exported records in this file (- for stdin)")
	cmd.Flags().StringVar(&f.head, "head", "", "also check the chain ends at or extends past this signed chain head (file, as scourd logged it) or SEQ:SHA256")
	cmd.Flags().StringArrayVar(&f.pubkeys, "pubkey", nil, "trust only this public key file (PEM; repeatable); HOST=FILE trusts it for HOST's records only")
	return cmd
}

func recordsVerify(ctx context.Context, sf *recordsStoreFlags, f recordsVerifyFlags, stdout io.Writer) error {
	n := 0
	for _, v := range []string{f.host, f.device, f.file} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return usagef("verify needs exactly one of --host, --device or --file")
	}
	trusted, err := readPubkeys(f.pubkeys)
	if err != nil {
		return err
	}
	var rep claims.VerifyReport
	if f.file != "" {
		rep, err = verifyFile(ctx, sf, f.file, trusted)
	} else {
		var s *claims.Store
		if s, err = sf.open(ctx); err != nil {
			return err
		}
		defer s.Close()
		if f.host != "" {
			rep, err = s.VerifyHost(ctx, f.host, trusted.of(f.host))
		} else {
			rep, err = s.VerifyDevice(ctx, f.device, trusted.of)
		}
	}
	if err != nil {
		return err
	}
	var head *claims.ChainHead
	if f.head != "" {
		if head, err = checkHead(ctx, sf, f, trusted, rep); err != nil {
			return err
		}
	}
	writeVerifyReport(stdout, rep)
	if head != nil {
		signed := "as given (unsigned)"
		if head.Signature != nil {
			signed = "signed by key " + head.Signature.KeyID
		}
		fmt.Fprintf(stdout, "%s: the chain reaches the chain head record %d (sha256 %s, %s) and ends at record %d\n",
			head.Host, head.HostSeq, head.RecordSHA256, signed, rep.LastSeq[head.Host])
		if !trusted.given {
			fmt.Fprintf(stdout, "WARN  --head without --pubkey is not conclusive: the head and the records were checked with the keys registered in the store, which whoever can write the store can replace; verify again with --pubkey %s's key kept outside the store (scourctl records pubkey, saved when the host was set up)\n", head.Host)
		}
	}
	return nil
}

// headSeqHash is --head SEQ:SHA256.
var headSeqHash = regexp.MustCompile(`^([0-9]+):([0-9a-fA-F]{64})$`)

// checkHead reads --head (a signed head document, checked against the
// trusted keys of its host, or SEQ:SHA256) and checks rep's chain reaches
// it (claims.VerifyReport.CheckHead).
func checkHead(ctx context.Context, sf *recordsStoreFlags, f recordsVerifyFlags, trusted pubkeys, rep claims.VerifyReport) (*claims.ChainHead, error) {
	var h claims.ChainHead
	if m := headSeqHash.FindStringSubmatch(f.head); m != nil {
		seq, err := strconv.Atoi(m[1])
		if err != nil || seq < 1 {
			return nil, usagef("--head %s: the record number must be 1 or more", f.head)
		}
		h = claims.ChainHead{HostSeq: seq, RecordSHA256: strings.ToLower(m[2]), Host: f.host}
		if h.Host == "" {
			if len(rep.Hosts) != 1 {
				return nil, usagef("--head SEQ:SHA256 names no host and the verified records are of %d hosts (%v): give --host, or a signed head file, which names its host", len(rep.Hosts), rep.Hosts)
			}
			h.Host = rep.Hosts[0]
		}
	} else {
		data, err := os.ReadFile(f.head)
		if err != nil {
			return nil, fmt.Errorf("--head %s: %w (give the signed chain head scourd logged, or SEQ:SHA256)", f.head, err)
		}
		doc, err := claims.ParseHeadDocument(data)
		if err != nil {
			return nil, fmt.Errorf("--head %s: %w", f.head, err)
		}
		var probe claims.ChainHead
		_ = json.Unmarshal(doc, &probe)
		keys := trusted.of(probe.Host)
		if keys == nil {
			if keys, err = storeKeys(ctx, sf, probe.Host); err != nil {
				return nil, fmt.Errorf("--head %s: no --pubkey given and the host's registered keys cannot be read to check the head's signature: %w", f.head, err)
			}
		}
		if h, err = claims.VerifyHead(doc, keys); err != nil {
			return nil, fmt.Errorf("--head %s: %w", f.head, err)
		}
		if f.host != "" && h.Host != f.host {
			return nil, fmt.Errorf("--head %s is host %s's chain head, not %s's: verify --host %s, or give that host's head", f.head, h.Host, f.host, h.Host)
		}
	}
	if err := rep.CheckHead(h); err != nil {
		return nil, fmt.Errorf("--head: %w", err)
	}
	return &h, nil
}

// storeKeys are the keys host registered in the store (for a signed head
// when no --pubkey was given).
func storeKeys(ctx context.Context, sf *recordsStoreFlags, host string) ([]ed25519.PublicKey, error) {
	s, err := sf.open(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	keys, err := s.HostKeys(ctx, host)
	if err != nil {
		return nil, err
	}
	return keys[host], nil
}

// pubkeys are the keys --pubkey gave: given is false without any (the
// store's registered keys are trusted then); all are trusted for every
// host, byHost for their host only (HOST=FILE).
type pubkeys struct {
	given  bool
	all    []ed25519.PublicKey
	byHost map[string][]ed25519.PublicKey
}

// of is the keys to trust for host's records: nil (the store's) when no
// --pubkey was given; else the unbound keys and host's own, which may be
// none (every record of host then fails as signed by an untrusted key).
func (k pubkeys) of(host string) []ed25519.PublicKey {
	if !k.given {
		return nil
	}
	keys := make([]ed25519.PublicKey, 0, len(k.all)+len(k.byHost[host])) // not nil: nil means the store's
	return append(append(keys, k.all...), k.byHost[host]...)
}

func readPubkeys(args []string) (pubkeys, error) {
	out := pubkeys{given: len(args) > 0, byHost: map[string][]ed25519.PublicKey{}}
	for _, a := range args {
		host, p, bound := strings.Cut(a, "=")
		if !bound || host == "" || strings.ContainsRune(host, '/') {
			host, p, bound = "", a, false
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return out, err
		}
		keys, err := claims.ParsePublicKeyPEM(data)
		if err != nil {
			return out, fmt.Errorf("--pubkey %s: %w", a, err)
		}
		if bound {
			out.byHost[host] = append(out.byHost[host], keys...)
		} else {
			out.all = append(out.all, keys...)
		}
	}
	return out, nil
}

// verifyFile checks exported records; without --pubkey it trusts the keys
// the store holds for each record's host.
func verifyFile(ctx context.Context, sf *recordsStoreFlags, path string, trusted pubkeys) (claims.VerifyReport, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return claims.VerifyReport{}, err
	}
	docs, err := claims.SplitDocuments(data)
	if err != nil {
		return claims.VerifyReport{}, fmt.Errorf("%s: %w", path, err)
	}
	keysOf := func(host string) ([]ed25519.PublicKey, error) { return trusted.of(host), nil }
	if !trusted.given {
		s, err := sf.open(ctx)
		if err != nil {
			return claims.VerifyReport{}, fmt.Errorf("no --pubkey given and the store with the hosts' keys cannot be opened: %w", err)
		}
		defer s.Close()
		keys, err := s.HostKeys(ctx, "")
		if err != nil {
			return claims.VerifyReport{}, err
		}
		keysOf = func(host string) ([]ed25519.PublicKey, error) { return keys[host], nil }
	}
	return claims.VerifyDocuments(docs, keysOf)
}

func writeVerifyReport(w io.Writer, rep claims.VerifyReport) {
	sort.Strings(rep.Hosts)
	var from []string
	for _, h := range rep.Hosts {
		from = append(from, fmt.Sprintf("%s from record %d", h, rep.FirstSeq[h]))
	}
	fmt.Fprintf(w, "OK: %d signed records verified (%s)", rep.Records, strings.Join(from, ", "))
	if rep.Unsigned > 0 {
		fmt.Fprintf(w, "; %d older records predate signing", rep.Unsigned)
	}
	fmt.Fprintln(w)
	for _, h := range rep.Hosts {
		fmt.Fprintf(w, "%s: newest record %d", h, rep.LastSeq[h])
		if t, ok := rep.LastEnded[h]; ok {
			fmt.Fprintf(w, ", closed %s", t.UTC().Format(time.RFC3339))
		}
		if n, ok := rep.PurgedThrough[h]; ok {
			fmt.Fprintf(w, "; records 1..%d purged by retention", n)
		}
		fmt.Fprintln(w, " (compare with the newest record you hold outside the store: deleting the newest records leaves no gap)")
	}
}

func newRecordsPubkey(sf *recordsStoreFlags, stdout io.Writer) *cobra.Command {
	var host string
	cmd := &cobra.Command{
		Use:   "pubkey [--host H]",
		Short: "the record-signing public keys the hosts registered (PEM), for records verify --pubkey",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return recordsPubkey(cmd.Context(), sf, host, stdout)
		},
	}
	cmd.Flags().StringVar(&host, "host", "", "only this host's keys")
	return cmd
}

func recordsPubkey(ctx context.Context, sf *recordsStoreFlags, host string, w io.Writer) error {
	s, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	keys, err := s.HostKeys(ctx, host)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return errors.New("no record-signing key registered (scourd registers its key at start)")
	}
	hosts := make([]string, 0, len(keys))
	for h := range keys {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		for _, k := range keys[h] {
			fmt.Fprintf(w, "# host %s, key %s\n%s", h, claims.KeyID(k), claims.PublicKeyPEM(k))
		}
	}
	return nil
}
