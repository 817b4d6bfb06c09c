package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scour-project/scour/claims"
)

func init() {
	register("records", subcommand{
		summary: "list, show and export cleaning records (certificates of sanitization)",
		run:     runRecords,
	})
}

const recordsUsage = `usage: scourctl records <list|show|export> [options]

  list   [--host H] [--device RP-OR-ADDRESS] [--state S] [--limit N]
  show   RUN-ID
  export (--run RUN-ID | --device RP-OR-ADDRESS [--host H] [--all])

export prints one JSON document per cleaning (the newest finished one for
the device, or with --all a JSON array of all of them).

Store options (every subcommand): the "claims:" section of scourd's config,
  --config FILE              (default /etc/scour/scour.yaml, env SCOUR_CONFIG;
                             skipped when the default file does not exist)
and these flags, which override it:
  --driver sqlite|postgres   (default sqlite; postgres when --dsn is given)
  --state-path DIR           scour's state_path (default /var/lib/scour)
  --db FILE                  claim_db, relative to --state-path (default claims.sqlite)
  --dsn DSN                  PostgreSQL connection string (central database)
`

// recordsStoreFlags is the store selection every records subcommand takes:
// the claims section of scourd's config (--config), overridden by the
// explicit store flags.
type recordsStoreFlags struct {
	cfg  claims.Config
	conf configFlag
}

func (sf *recordsStoreFlags) register(fs *flag.FlagSet) {
	sf.conf.register(fs)
	fs.StringVar(&sf.cfg.Driver, "driver", "", "store driver: sqlite or postgres")
	fs.StringVar(&sf.cfg.StatePath, "state-path", claims.DefaultStatePath, "scour state directory (state_path)")
	fs.StringVar(&sf.cfg.ClaimDB, "db", claims.DefaultClaimDB, "sqlite file (claim_db), relative to --state-path")
	fs.StringVar(&sf.cfg.DSN, "dsn", "", "PostgreSQL DSN (driver postgres)")
}

// storeConfig merges scourd's claims section with the flags given.
func (sf *recordsStoreFlags) storeConfig() (claims.Config, error) {
	c := sf.cfg
	sc, err := sf.conf.load(true)
	if err != nil {
		return c, err
	}
	set := flagSet(sf.conf.fs)
	if sc != nil {
		base := sc.Claims
		if set["driver"] {
			base.Driver = c.Driver
		}
		if set["state-path"] {
			base.StatePath = c.StatePath
		}
		if set["db"] {
			base.ClaimDB = c.ClaimDB
		}
		if set["dsn"] {
			base.DSN = c.DSN
			if !set["driver"] {
				base.Driver = ""
			}
		}
		if set["state-path"] && !set["driver"] && !set["dsn"] {
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

func runRecords(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, recordsUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmds := map[string]func(context.Context, []string, io.Writer) error{
		"list": recordsList, "show": recordsShow, "export": recordsExport,
	}
	fn, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "scourctl records: unknown subcommand %q\n\n%s", args[0], recordsUsage)
		return 2
	}
	err := fn(ctx, args[1:], stdout)
	var ue recordsUsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, recordsUsage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "scourctl records %s: %v\n\n%s", args[0], err, recordsUsage)
		return 2
	default:
		fmt.Fprintf(stderr, "scourctl records %s: %v\n", args[0], err)
		return 1
	}
}

type recordsUsageError struct{ msg string }

func (e recordsUsageError) Error() string { return e.msg }

func parseRecordsFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return recordsUsageError{err.Error()}
	}
	return nil
}

func recordsList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	var sf recordsStoreFlags
	sf.register(fs)
	var f claims.RunFilter
	var state string
	fs.StringVar(&f.Host, "host", "", "only runs on this host")
	fs.StringVar(&f.Device, "device", "", "only runs of this device (resource provider uuid or PCI address)")
	fs.StringVar(&state, "state", "", "only runs in this state (running, returned, quarantined, aborted)")
	fs.IntVar(&f.Limit, "limit", 100, "at most this many runs, newest first (0: all)")
	if err := parseRecordsFlags(fs, args); err != nil {
		return err
	}
	f.State = claims.RunState(state)
	s, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	runs, err := s.ListRuns(ctx, f)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tHOST\tDEVICE RP\tADDRESS\tSTATE\tSTARTED\tENDED\tPIPELINE")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s %s\n", r.ID, r.Host, r.DeviceRP, recordsDash(r.Address), r.State,
			r.StartedAt.Format(time.RFC3339), recordsTime(r.EndedAt), r.Pipeline, r.PipelineVersion)
	}
	return tw.Flush()
}

func recordsShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	var sf recordsStoreFlags
	sf.register(fs)
	if err := parseRecordsFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return recordsUsageError{"show needs exactly one RUN-ID"}
	}
	s, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	rec, err := s.Record(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	writeRecordText(stdout, rec)
	return nil
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

func recordsExport(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	var sf recordsStoreFlags
	sf.register(fs)
	var runID, device, host string
	var all bool
	fs.StringVar(&runID, "run", "", "export this run")
	fs.StringVar(&device, "device", "", "export the newest finished run of this device (resource provider uuid or PCI address)")
	fs.StringVar(&host, "host", "", "with --device: only runs on this host (PCI addresses repeat across hosts)")
	fs.BoolVar(&all, "all", false, "with --device: every finished run, as a JSON array")
	if err := parseRecordsFlags(fs, args); err != nil {
		return err
	}
	if (runID == "") == (device == "") || fs.NArg() != 0 {
		return recordsUsageError{"export needs exactly one of --run or --device"}
	}
	s, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	if runID != "" {
		rec, err := s.Record(ctx, runID)
		if err != nil {
			return err
		}
		return rec.WriteJSON(stdout)
	}
	runs, err := s.ListRuns(ctx, claims.RunFilter{Host: host, Device: device})
	if err != nil {
		return err
	}
	hosts := map[string]bool{}
	for _, r := range runs {
		hosts[r.Host] = true
	}
	if len(hosts) > 1 {
		return recordsUsageError{fmt.Sprintf("device %s matches runs on %d hosts; add --host (PCI addresses repeat across hosts)", device, len(hosts))}
	}
	var recs []claims.Record
	var running []string
	for _, r := range runs {
		if !r.Finished() {
			running = append(running, r.ID)
			continue
		}
		rec, err := s.Record(ctx, r.ID)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		if !all {
			break
		}
	}
	if len(recs) == 0 {
		msg := fmt.Sprintf("no finished cleaning record for device %s", device)
		if len(running) > 0 {
			msg += fmt.Sprintf(" (cleaning in progress: run %s; see scourctl records show)", strings.Join(running, ", "))
		}
		return errors.New(msg)
	}
	if !all {
		return recs[0].WriteJSON(stdout)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(recs)
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
