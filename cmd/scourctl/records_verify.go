package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/claims"
)

type recordsVerifyFlags struct {
	host, device, file string
	pubkeys            []string
}

func newRecordsVerify(sf *recordsStoreFlags, stdout io.Writer) *cobra.Command {
	var f recordsVerifyFlags
	cmd := &cobra.Command{
		Use:   "verify (--host H | --device RP-OR-ADDRESS | --file RECORDS.json) [--pubkey KEY.pub]...",
		Short: "check the signatures and the chain of cleaning records; names the first break",
		Long: `Checks cleaning records: each record's Ed25519 signature, that its key is
the host's, and the chain (every record carries the hash of its host's
previous one, so a changed, deleted or foreign record breaks it).

--host and --device check the store's records of the host (or of every host
holding a record of the device), from the first record on; --file checks
exported records (one, an array, or several documents) and the links
between consecutive records it holds. Trusted keys: each --pubkey file (PEM,
as scourd writes it next to its key, or scourctl records pubkey prints),
else the keys the hosts registered in the store. Exit status 1 and the
first break on failure.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return recordsVerify(cmd.Context(), sf, f, stdout)
		},
	}
	cmd.Flags().StringVar(&f.host, "host", "", "verify this host's chain in the store")
	cmd.Flags().StringVar(&f.device, "device", "", "verify the chains holding this device's records")
	cmd.Flags().StringVar(&f.file, "file", "", "verify exported records in this file (- for stdin)")
	cmd.Flags().StringArrayVar(&f.pubkeys, "pubkey", nil, "trust only this public key file (PEM; repeatable)")
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
			rep, err = s.VerifyHost(ctx, f.host, trusted)
		} else {
			rep, err = s.VerifyDevice(ctx, f.device, trusted)
		}
	}
	if err != nil {
		return err
	}
	writeVerifyReport(stdout, rep)
	return nil
}

func readPubkeys(paths []string) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		keys, err := claims.ParsePublicKeyPEM(data)
		if err != nil {
			return nil, fmt.Errorf("--pubkey %s: %w", p, err)
		}
		out = append(out, keys...)
	}
	return out, nil
}

// verifyFile checks exported records; without --pubkey it trusts the keys
// the store holds for each record's host.
func verifyFile(ctx context.Context, sf *recordsStoreFlags, path string, trusted []ed25519.PublicKey) (claims.VerifyReport, error) {
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
	keysOf := func(string) ([]ed25519.PublicKey, error) { return trusted, nil }
	if trusted == nil {
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
