package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"text/tabwriter"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
)

func init() {
	register("status", subcommand{
		summary: "per device of this host: Placement state, last cleaning verdict, open run",
		run:     runStatus,
	})
}

// configEnv names scourd's config file, as for scourd itself.
const configEnv = "SCOUR_CONFIG"

// configFlag is --config: scourd's own configuration file, read the way
// scourd reads it (config.Load: YAML, SCOUR_* environment overrides,
// defaults, validation), so scourctl and scourd always agree on where the
// store, Placement and the hardware are.
type configFlag struct {
	path string
	fs   *flag.FlagSet
}

func (c *configFlag) register(fs *flag.FlagSet) {
	c.fs = fs
	def := config.DefaultPath
	if v := os.Getenv(configEnv); v != "" {
		def = v
	}
	fs.StringVar(&c.path, "config", def, "scourd's configuration file (env "+configEnv+")")
}

// explicit reports whether the operator named the file (flag or env).
func (c *configFlag) explicit() bool {
	return flagSet(c.fs)["config"] || os.Getenv(configEnv) != ""
}

// load reads scourd's configuration. With optional, a default path that
// does not exist is no error: it returns nil and the caller keeps its
// flags' defaults (scourctl records on a machine without scourd).
func (c *configFlag) load(optional bool) (*config.Config, error) {
	if optional && !c.explicit() {
		if _, err := os.Stat(c.path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	cfg, err := config.Load(c.path, true, os.Environ())
	if err != nil {
		return nil, fmt.Errorf("%w\n(scourctl reads scourd's configuration; pass --config FILE or set %s)", err, configEnv)
	}
	return cfg, nil
}

// flagSet returns the names of the flags given on the command line.
func flagSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	if fs != nil {
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	}
	return set
}

const statusUsage = `usage: scourctl status [--config FILE]

For each one-time-use device of this host (scourd's config: host, Placement,
claims store): its Placement state and reserved/total, the verdict of its
last finished cleaning run, and the cleaning run open now, if any.

Options:
`

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, statusUsage); fs.PrintDefaults() }
	var cf configFlag
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "scourctl status: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	cfg, err := cf.load(false)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl status: %v\n", err)
		return 1
	}
	if err := writeStatus(ctx, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "scourctl status: %v\n", err)
		return 1
	}
	return 0
}

func writeStatus(ctx context.Context, cfg *config.Config, w io.Writer) error {
	pc, err := placementClient(ctx, cfg)
	if err != nil {
		return err
	}
	scan, err := pc.Scan(ctx)
	if err != nil {
		return fmt.Errorf("scanning host %s in Placement: %w", cfg.Host, err)
	}
	s, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()))
	if err != nil {
		return fmt.Errorf("claims store: %w", err)
	}
	defer s.Close()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tSTATE\tRESERVED\tLAST RUN\tVERDICT\tENDED\tOPEN RUN")
	for _, d := range scan.Devices {
		runs, err := s.ListRuns(ctx, claims.RunFilter{Host: cfg.Host, Device: d.UUID, Limit: 20})
		if err != nil {
			return fmt.Errorf("cleaning runs of %s: %w", d.Ref, err)
		}
		last, verdict, ended, open := "-", "-", "-", "-"
		for _, r := range runs {
			switch {
			case !r.Finished() && open == "-":
				open = fmt.Sprintf("%s (since %s)", r.ID, r.StartedAt.Format("2006-01-02T15:04:05Z07:00"))
			case r.Finished() && last == "-":
				last, verdict, ended = r.ID, string(r.State), recordsTime(r.EndedAt)
			}
		}
		state := string(d.State)
		if d.Why != "" {
			state += " (" + d.Why + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", recordsDash(string(d.Address)), state,
			d.Inventory.Reserved, d.Inventory.Total, last, verdict, ended, open)
	}
	return tw.Flush()
}
