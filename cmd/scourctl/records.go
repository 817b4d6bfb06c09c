package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/claims"
)

func init() {
	register(func(c *cli) *cobra.Command {
		var sf recordsStoreFlags
		sf.cli = c
		var f claims.RunFilter
		var state string
		list := &cobra.Command{
			Use:   "list",
			Short: "cleaning runs, newest first",
			Long:  "Cleaning runs, newest first.\n\nColumns: " + joinKeys(recordColumns),
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				f.State = claims.RunState(state)
				runs, err := recordsList(cmd.Context(), &sf, f)
				if err != nil {
					return err
				}
				return c.out.write(c.stdout, recordsListing(runs))
			},
		}
		list.Flags().StringVar(&f.Host, "host", "", "only runs on this host")
		list.Flags().StringVar(&f.Device, "device", "", "only runs of this device (resource provider uuid or PCI address)")
		list.Flags().StringVar(&state, "state", "", "only runs in this state (running, cleaned, returned, quarantined, aborted, failed)")
		list.Flags().IntVar(&f.Limit, "limit", 100, "at most this many runs, newest first (0: all)")

		show := &cobra.Command{
			Use:   "show RUN-ID",
			Short: "one cleaning run and its steps (-o json|yaml: the record)",
			Args:  exactArgs(1, "one RUN-ID"),
			RunE: func(cmd *cobra.Command, args []string) error {
				rec, err := recordsShow(cmd.Context(), &sf, args[0])
				if err != nil {
					return err
				}
				switch format := c.out.formatOr(formatTable); format {
				case formatJSON, formatYAML:
					return writeDocument(c.stdout, format, rec)
				default:
					writeRecordText(c.stdout, rec)
					return nil
				}
			},
		}

		var ef recordsExportFlags
		export := &cobra.Command{
			Use:   "export (--run RUN-ID | --device RP-OR-ADDRESS [--host H] [--all])",
			Short: "the record (certificate of sanitization) of a cleaning, as JSON or printable HTML",
			Long: `Prints one JSON document per cleaning: the newest finished one for the
device, or with --all a JSON array of all of them.`,
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return recordsExport(cmd.Context(), &sf, ef, c.stdout, c.stderr)
			},
		}
		export.Flags().StringVar(&ef.runID, "run", "", "export this run")
		export.Flags().StringVar(&ef.device, "device", "", "export the newest finished run of this device (resource provider uuid or PCI address)")
		export.Flags().StringVar(&ef.host, "host", "", "with --device: only runs on this host (PCI addresses repeat across hosts)")
		export.Flags().BoolVar(&ef.all, "all", false, "with --device: every finished run, as a JSON array (html: one page each)")
		export.Flags().StringVar(&ef.format, "format", "json", "json (the signed machine format) or html (a printable certificate)")

		g := group("records", "list, show, export and verify cleaning records (certificates of sanitization)", recordsHelp, list, show, export,
			newRecordsVerify(&sf, c.stdout), newRecordsPubkey(&sf, c.stdout))
		sf.register(g)
		return g
	})
}

const recordsHelp = `List, show and export cleaning records (certificates of sanitization).

The store is the "claims:" section of scourd's config (--config, default
/etc/scour/scour.yaml, env SCOUR_CONFIG; skipped when the default file does
not exist); the flags --driver, --state-path, --db and --dsn override it.`

// recordsStoreFlags is the store selection every records subcommand takes:
// the claims section of scourd's config (--config), overridden by the
// explicit store flags.
type recordsStoreFlags struct {
	cli *cli
	cfg claims.Config
	set func(name string) bool
}

func (sf *recordsStoreFlags) register(g *cobra.Command) {
	pf := g.PersistentFlags()
	pf.StringVar(&sf.cfg.Driver, "driver", "", "store driver: sqlite or postgres (default sqlite; postgres when --dsn is given)")
	pf.StringVar(&sf.cfg.StatePath, "state-path", claims.DefaultStatePath, "scour state directory (state_path)")
	pf.StringVar(&sf.cfg.ClaimDB, "db", claims.DefaultClaimDB, "sqlite file (claim_db), relative to --state-path")
	pf.StringVar(&sf.cfg.DSN, "dsn", "", "PostgreSQL DSN (driver postgres; a central database)")
	sf.set = func(name string) bool { return pf.Changed(name) }
}

// storeConfig merges scourd's claims section with the flags given.
func (sf *recordsStoreFlags) storeConfig() (claims.Config, error) {
	c := sf.cfg
	sc, err := sf.cli.loadConfig(true)
	if err != nil {
		return c, err
	}
	set := sf.set
	if sc != nil {
		base := sc.Claims
		if set("driver") {
			base.Driver = c.Driver
		}
		if set("state-path") {
			base.StatePath = c.StatePath
		}
		if set("db") {
			base.ClaimDB = c.ClaimDB
		}
		if set("dsn") {
			base.DSN = c.DSN
			if !set("driver") {
				base.Driver = ""
			}
		}
		if set("state-path") && !set("driver") && !set("dsn") {
			// A state directory names a sqlite store.
			base.Driver, base.DSN = claims.DriverSQLite, ""
		}
		c = base
	}
	if c.Driver == "" && c.DSN != "" {
		c.Driver = claims.DriverPostgres
	}
	return c, nil
}

func (sf *recordsStoreFlags) open(ctx context.Context) (*claims.Store, error) {
	c, err := sf.storeConfig()
	if err != nil {
		return nil, err
	}
	// scourctl only reads: it never creates or upgrades the schema.
	return claims.Open(ctx, c, claims.ReadOnlySchema())
}

var recordColumns = []string{"run", "host", "device_rp", "address", "state", "started", "ended", "pipeline", "pipeline_version"}

func recordsListing(runs []claims.Run) *listing {
	l := newListing(recordColumns...)
	for _, r := range runs {
		l.add(r.ID, r.Host, r.DeviceRP, r.Address, string(r.State), r.StartedAt.Format(time.RFC3339), timeText(r.EndedAt),
			r.Pipeline, r.PipelineVersion)
	}
	return l
}

func recordsList(ctx context.Context, sf *recordsStoreFlags, f claims.RunFilter) ([]claims.Run, error) {
	s, err := sf.open(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.ListRuns(ctx, f)
}

func recordsShow(ctx context.Context, sf *recordsStoreFlags, runID string) (claims.Record, error) {
	s, err := sf.open(ctx)
	if err != nil {
		return claims.Record{}, err
	}
	defer s.Close()
	return s.Record(ctx, runID)
}

func writeRecordText(w io.Writer, rec claims.Record) {
	fmt.Fprintf(w, "Cleaning run %s on %s\n", rec.RunID, rec.Host)
	fmt.Fprintf(w, "  device:      %s at %s", rec.Device.ResourceProvider, recordsDash(rec.Device.PCIAddress))
	if rec.Device.Model != "" || rec.Device.Serial != "" {
		fmt.Fprintf(w, " (%s, serial %s)", recordsDash(rec.Device.Model), recordsDash(rec.Device.Serial))
	}
	fmt.Fprintf(w, "\n  previous:    instance %s, project %s\n", rec.PreviousTenant.InstanceUUID, rec.PreviousTenant.ProjectID)
	fmt.Fprintf(w, "  pipeline:    %s %s, triggered by %s\n", rec.Method.Pipeline, rec.Method.PipelineVersion, recordsDash(rec.TriggeredBy))
	fmt.Fprintf(w, "  result:      %s %s\n", strings.ToUpper(rec.Result.State), rec.Result.Summary)
	if rt := rec.Retirement; rt != nil {
		wiped := "NOT WIPED"
		if rt.Wiped {
			wiped = "wiped by step " + rt.WipeStep + " (" + recordsDash(rt.Technique) + ")"
		}
		if rt.ReadBack != "" {
			wiped += ", read-back " + rt.ReadBack
		}
		fmt.Fprintf(w, "  retirement:  decided by %s; %s: %s\n", rt.Step, wiped, rt.Note)
	}
	fmt.Fprintf(w, "  started:     %s\n  ended:       %s\n\n", rec.StartedAt.Format(time.RFC3339), recordsTime(rec.EndedAt))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTEP\tATTEMPT\tOUTCOME\tPROGRESS\tSTARTED\tENDED\tOUTPUT")
	for _, st := range rec.Method.Steps {
		name := st.Name
		if st.Verification {
			name += " (verify)"
		}
		out := strings.ReplaceAll(st.Output, "\n", " ")
		if len(out) > 60 {
			out = out[:57] + "..."
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%d%%\t%s\t%s\t%s\n", st.Seq, name, st.Attempt, st.Outcome, st.Progress,
			st.StartedAt.Format(time.RFC3339), recordsTime(st.EndedAt), out)
	}
	tw.Flush()
}

type recordsExportFlags struct {
	runID, device, host string
	all                 bool
	format              string
}

func recordsExport(ctx context.Context, sf *recordsStoreFlags, f recordsExportFlags, stdout, stderr io.Writer) error {
	runID, device, host, all := f.runID, f.device, f.host, f.all
	if (runID == "") == (device == "") {
		return usagef("export needs exactly one of --run or --device")
	}
	if f.format != "json" && f.format != "html" {
		return usagef("--format %q: want json or html", f.format)
	}
	s, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	var ids []string
	if runID != "" {
		ids = []string{runID}
	} else if ids, err = exportRunIDs(ctx, s, device, host, all); err != nil {
		return err
	}
	docs := make([]json.RawMessage, 0, len(ids))
	var final []string
	for _, id := range ids {
		doc, done, err := s.ExportRecord(ctx, id)
		if err != nil {
			return err
		}
		docs = append(docs, doc)
		if done {
			final = append(final, id)
		} else {
			// Retention must keep the final record this is not.
			fmt.Fprintf(stderr, "run %s is not finished (a cleaned run waits for its un-reserve): this record is not final and not signed, "+
				"and is not marked exported; export it again once the run is closed (scourctl records show %s)\n", id, id)
		}
	}
	if err := writeExport(stdout, f.format, docs, all); err != nil {
		return err
	}
	// Only now may retention purge them (unless purge_unexported): only
	// the final records, exactly as written above.
	if err := s.MarkExported(ctx, final...); err != nil {
		return fmt.Errorf("records written, but not marked exported (retention keeps them): %w", err)
	}
	return nil
}

// writeExport writes the documents as JSON (one, or an array with all) or
// as an HTML certificate.
func writeExport(w io.Writer, format string, docs []json.RawMessage, all bool) error {
	if format == "html" {
		recs := make([]claims.Record, len(docs))
		for i, d := range docs {
			if err := json.Unmarshal(d, &recs[i]); err != nil {
				return err
			}
		}
		return writeCertificateHTML(w, recs)
	}
	var out any = docs[0]
	if all {
		out = docs
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// exportRunIDs picks the device's newest closed run, or all of them.
func exportRunIDs(ctx context.Context, s *claims.Store, device, host string, all bool) ([]string, error) {
	runs, err := s.ListRuns(ctx, claims.RunFilter{Host: host, Device: device})
	if err != nil {
		return nil, err
	}
	hosts := map[string]bool{}
	for _, r := range runs {
		hosts[r.Host] = true
	}
	if len(hosts) > 1 {
		return nil, usagef("device %s matches runs on %d hosts; add --host (PCI addresses repeat across hosts)", device, len(hosts))
	}
	var ids, open []string
	for _, r := range runs {
		if !r.Closed() {
			open = append(open, fmt.Sprintf("%s (%s)", r.ID, r.State))
			continue
		}
		ids = append(ids, r.ID)
		if !all {
			break
		}
	}
	if len(ids) == 0 {
		msg := fmt.Sprintf("no finished cleaning record for device %s", device)
		if len(open) > 0 {
			msg += fmt.Sprintf(" (still open: run %s; a cleaned run waits for its un-reserve; see scourctl records show)", strings.Join(open, ", "))
		}
		return nil, errors.New(msg)
	}
	return ids, nil
}

func recordsDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func recordsTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// timeText is t in RFC 3339, or "" when it is not set (shown as "-").
func timeText(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.Format(time.RFC3339)
}

func joinKeys(keys []string) string { return strings.Join(keys, ", ") }
