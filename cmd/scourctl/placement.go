package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/placement"
)

func init() {
	register("placement", subcommand{
		summary: "this host's one-time-use devices in Placement (scan), and releasing a quarantined one (unquarantine)",
		run:     runPlacement,
	})
}

const placementUsage = `usage: scourctl placement <scan|unquarantine> [--config FILE] [arguments]

  scan                         table of this host's one-time-use devices in
                               Placement: state, reserved/total, consumers,
                               quarantine
  unquarantine RP-UUID|ADDRESS remove the quarantine trait from one device of
                               this host (refused unless it is quarantined)

Placement, the host's compute node and the traits come from scourd's
configuration (--config, default /etc/scour/scour.yaml, env SCOUR_CONFIG).

Unquarantine is the operator's explicit action once the cause is fixed
(inspect the record first: scourctl records export --device ADDRESS). The
device stays reserved: it is dirty again, so scourd's next scan (at the
latest after lifecycle.reconcile_interval) cleans it with its full pipeline
and only a clean run returns it to the pool. That run counts against the
profile's max_runs together with the failed runs since the device was last
returned: a recoverable failure of it quarantines the device again at once.
`

func runPlacement(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, placementUsage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, placementUsage)
		return 0
	case "scan", "unquarantine":
	default:
		fmt.Fprintf(stderr, "scourctl placement: unknown subcommand %q\n\n%s", args[0], placementUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("placement "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, placementUsage, "\nOptions:\n"); fs.PrintDefaults() }
	var cf configFlag
	cf.register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var target string
	switch {
	case sub == "scan" && fs.NArg() != 0:
		fmt.Fprintf(stderr, "scourctl placement scan: unexpected argument %q\n", fs.Arg(0))
		return 2
	case sub == "unquarantine" && fs.NArg() != 1:
		fmt.Fprintf(stderr, "scourctl placement unquarantine: needs exactly one RP-UUID or PCI address (got %d arguments)\n", fs.NArg())
		return 2
	case sub == "unquarantine":
		target = fs.Arg(0)
	}
	cfg, err := cf.load(false)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl placement %s: %v\n", sub, err)
		return 1
	}
	pc, err := placementClient(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "scourctl placement %s: %v\n", sub, err)
		return 1
	}
	if sub == "scan" {
		err = placementScan(ctx, pc, stdout)
	} else {
		err = placementUnquarantine(ctx, pc, cfg, target, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "scourctl placement %s: %v\n", sub, err)
		return 1
	}
	return 0
}

// quietLog drops the libraries' informational logs: scourctl prints its
// own results.
func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// placementClient connects to Placement as scourd on this host does.
func placementClient(ctx context.Context, cfg *config.Config) (*placement.Client, error) {
	pc, err := placement.New(ctx, cfg.Placement, placement.WithLogger(quietLog()))
	if err != nil {
		return nil, fmt.Errorf("connecting to Placement for node %s: %w", cfg.Placement.Node, err)
	}
	return pc, nil
}

func placementScan(ctx context.Context, pc *placement.Client, w io.Writer) error {
	res, err := pc.Scan(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "compute node %s (rp %s): %d one-time-use devices\n", res.Node, res.NodeUUID, len(res.Devices))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRP\tADDRESS\tSTATE\tRESERVED\tCONSUMERS\tQUARANTINED")
	for _, d := range res.Devices {
		state := string(d.State)
		if d.Why != "" {
			state += " (" + d.Why + ")"
		}
		cons := "-"
		if len(d.Consumers) > 0 {
			cons = strings.Join(d.Consumers, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", d.Name, d.UUID, recordsDash(string(d.Address)), state,
			d.Inventory.Reserved, d.Inventory.Total, cons, yesNo(d.Quarantined))
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// findDevice picks one device of the scan by resource provider UUID or PCI
// address (any accepted spelling).
func findDevice(devs []placement.Device, target string) (placement.Device, error) {
	addr, addrErr := hardware.ParseAddress(target)
	for _, d := range devs {
		if strings.EqualFold(d.UUID, target) || (addrErr == nil && d.Address == addr) {
			return d, nil
		}
	}
	return placement.Device{}, fmt.Errorf("no one-time-use device %q on this host's compute node in Placement (see scourctl placement scan)", target)
}

func placementUnquarantine(ctx context.Context, pc *placement.Client, cfg *config.Config, target string, w io.Writer) error {
	res, err := pc.Scan(ctx)
	if err != nil {
		return err
	}
	d, err := findDevice(res.Devices, target)
	if err != nil {
		return err
	}
	// The claims store is the authority on a quarantine (the trait only
	// shows it, and can be lost): release it there first, then remove the
	// trait. A failure between the two leaves the trait on, which keeps
	// the device out of cleaning: run the command again.
	store, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()))
	if err != nil {
		return fmt.Errorf("opening the claims store (where quarantines are recorded): %w", err)
	}
	defer store.Close()
	q, recorded, err := store.ActiveQuarantine(ctx, cfg.Host, d.UUID)
	if err != nil {
		return err
	}
	if !d.Quarantined && !recorded {
		return fmt.Errorf("device %s is not quarantined (state %s, reserved %d/%d): nothing to do; unquarantine only releases a device scour quarantined",
			d.Ref, d.State, d.Inventory.Reserved, d.Inventory.Total)
	}
	if len(d.Consumers) > 0 {
		return fmt.Errorf("device %s is quarantined but allocated to %s: refusing; delete or move the consumer first", d.Ref, strings.Join(d.Consumers, ","))
	}
	if recorded {
		if _, err := store.ReleaseQuarantine(ctx, cfg.Host, d.UUID, operatorName(), "scourctl placement unquarantine"); err != nil {
			return err
		}
		fmt.Fprintf(w, "released the quarantine recorded by run %s (%s) in the claims store\n", q.RunID, q.Reason)
	}
	if d.Quarantined {
		if err := pc.Unquarantine(ctx, d.Ref); err != nil {
			return err
		}
		fmt.Fprintf(w, "removed trait %s from %s\n", cfg.Placement.QuarantineTrait, d.Ref)
	}
	fmt.Fprintf(w, "the device is still reserved (%d/%d): it is dirty, not available.\n", d.Inventory.Reserved, d.Inventory.Total)
	fmt.Fprintf(w, "scourd on %s cleans it again with its full pipeline at its next scan (within lifecycle.reconcile_interval = %s)\n",
		cfg.Host, cfg.Lifecycle.ReconcileInterval)
	fmt.Fprintf(w, "and returns it to the pool only if that run is clean; follow it with: scourctl status, scourctl records list --device %s\n", d.Address)
	return nil
}

// operatorName is who released a quarantine, for the record.
func operatorName() string {
	for _, k := range []string{"SUDO_USER", "USER", "LOGNAME"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "operator"
}
