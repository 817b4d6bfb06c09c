package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/placement"
)

func init() {
	register(func(c *cli) *cobra.Command {
		scan := &cobra.Command{
			Use:   "scan",
			Short: "table of this host's one-time-use devices in Placement",
			Long: `Table of this host's one-time-use devices in Placement: state,
reserved/total, consumers, quarantine.

Columns: ` + joinKeys(placementColumns),
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, pc, err := c.placement(cmd.Context())
				if err != nil {
					return err
				}
				res, err := pc.Scan(cmd.Context())
				if err != nil {
					return err
				}
				if c.out.formatOr(formatTable) == formatTable && len(c.out.columns) == 0 {
					fmt.Fprintf(c.stdout, "compute node %s (rp %s): %d one-time-use devices\n", res.Node, res.NodeUUID, len(res.Devices))
				}
				return c.out.write(c.stdout, placementListing(res.Devices))
			},
		}
		return group("placement", "this host's one-time-use devices in Placement (scan), and releasing a quarantined one (unquarantine)",
			"Placement, the host's compute node and the traits come from scourd's\nconfiguration (--config, default /etc/scour/scour.yaml, env SCOUR_CONFIG).\n\n"+unquarantineHelp,
			scan, unquarantineCmd(c))
	})
	// Also at the top, beside retire and clean.
	register(unquarantineCmd)
}

func unquarantineCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "unquarantine RP-UUID|ADDRESS",
		Short: "remove the quarantine or retirement from one device of this host (refused unless it has one)",
		Long:  unquarantineHelp,
		Args:  exactArgs(1, "one RP-UUID or PCI address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, pc, err := c.placement(cmd.Context())
			if err != nil {
				return err
			}
			return placementUnquarantine(cmd.Context(), pc, cfg, args[0], c.stdout)
		},
	}
}

const unquarantineHelp = `Unquarantine is the operator's explicit action once the cause is fixed
(inspect the record first: scourctl records export --device ADDRESS). The
device stays reserved: if Placement shows it below reserved=total (an
inventory set without --amend, a re-created provider), unquarantine sets
reserved=total first and releases nothing when it cannot; it prints what
Placement shows after its writes. The device is dirty again, so scourd (told at once over its
admin socket; otherwise at the latest after lifecycle.reconcile_interval)
cleans it with its full pipeline and only a clean run returns it to the
pool. That run counts against the
profile's max_runs together with the failed runs since the device was last
returned: a recoverable failure of it quarantines the device again at once.`

var placementColumns = []string{"name", "rp", "address", "state", "reserved", "consumers", "quarantined"}

func placementListing(devs []placement.Device) *listing {
	l := newListing(placementColumns...)
	for _, d := range devs {
		state := string(d.State)
		if d.Why != "" {
			state += " (" + d.Why + ")"
		}
		l.add(d.Name, d.UUID, string(d.Address), state, fmt.Sprintf("%d/%d", d.Inventory.Reserved, d.Inventory.Total),
			d.Consumers, d.Quarantined)
	}
	return l
}

// quietLog drops the libraries' informational logs: scourctl prints its
// own results.
func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// placement reads scourd's config and connects to Placement with it.
func (c *cli) placement(ctx context.Context) (*config.Config, *placement.Client, error) {
	cfg, err := c.loadConfig(false)
	if err != nil {
		return nil, nil, err
	}
	pc, err := c.placementClient(ctx, cfg)
	return cfg, pc, err
}

// placementClient connects to Placement as scourd on this host does, with
// the OS_* credentials of scourd's environment (loadConfig's).
func (c *cli) placementClient(ctx context.Context, cfg *config.Config) (*placement.Client, error) {
	pc, err := placement.New(ctx, cfg.Placement, placement.WithLogger(quietLog()), placement.WithGetenv(c.getenv))
	if err != nil {
		return nil, fmt.Errorf("connecting to Placement for node %s: %w", cfg.Placement.Node, err)
	}
	return pc, nil
}

func placementUnquarantine(ctx context.Context, pc *placement.Client, cfg *config.Config, target string, w io.Writer) error {
	// The claims store is the authority on a quarantine (the trait only
	// shows it, and can be lost): release it there first, then remove the
	// trait. A failure between the two leaves the trait on, which keeps
	// the device out of cleaning: run the command again.
	store, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()))
	if err != nil {
		return fmt.Errorf("opening the claims store (where quarantines are recorded): %w", err)
	}
	defer store.Close()
	d, err := unquarantine(ctx, pc, store, cfg, target, w)
	if err != nil {
		return err
	}
	if err := admin.NewClient(adminSocket(cfg)).Rescan(ctx, "unquarantine of "+d.UUID+" by "+operatorName()); err != nil {
		fmt.Fprintf(w, "could not ask scourd to scan now (%v):\n", err)
		fmt.Fprintf(w, "scourd on %s cleans it again with its full pipeline at its next scan (within lifecycle.reconcile_interval = %s)\n",
			cfg.Host, cfg.Lifecycle.ReconcileInterval)
	} else {
		fmt.Fprintf(w, "scourd on %s scans now and cleans it again with its full pipeline\n", cfg.Host)
	}
	fmt.Fprintf(w, "and returns it to the pool only if that run is clean; follow it with: scourctl status, scourctl records list --device %s\n", d.Address)
	return nil
}

// unquarantinePlacement is what unquarantine asks of Placement
// (placement.Client).
type unquarantinePlacement interface {
	Scan(ctx context.Context) (*placement.ScanResult, error)
	Reserve(ctx context.Context, dev placement.Ref) error
	Unquarantine(ctx context.Context, dev placement.Ref) error
}

// quarantineStore is what unquarantine asks of the claims store.
type quarantineStore interface {
	ActiveQuarantine(ctx context.Context, host, deviceRP string) (claims.Quarantine, bool, error)
	ReleaseQuarantine(ctx context.Context, host, deviceRP, by, reason string) (bool, error)
}

// unquarantine releases target's quarantine and leaves it dirty: fenced
// (reserved = total) first, whatever lowered reserved meanwhile (an
// inventory set without --amend, a re-created provider), so that the
// release never returns an uncleaned device to the pool; the quarantine
// stays when the fence cannot be written. It prints what Placement
// shows after its writes.
func unquarantine(ctx context.Context, pc unquarantinePlacement, store quarantineStore, cfg *config.Config, target string, w io.Writer) (placement.Device, error) {
	res, err := pc.Scan(ctx)
	if err != nil {
		return placement.Device{}, err
	}
	d, err := admin.FindDevice(res.Devices, target)
	if err != nil {
		return placement.Device{}, err
	}
	q, recorded, err := store.ActiveQuarantine(ctx, cfg.Host, d.UUID)
	if err != nil {
		return d, err
	}
	if !d.Quarantined && !recorded {
		return d, fmt.Errorf("device %s is not quarantined (state %s, reserved %d/%d): nothing to do; unquarantine only releases a device scour quarantined",
			d.Ref, d.State, d.Inventory.Reserved, d.Inventory.Total)
	}
	if len(d.Consumers) > 0 {
		return d, fmt.Errorf("device %s is quarantined but allocated to %s: refusing; delete or move the consumer first", d.Ref, strings.Join(d.Consumers, ","))
	}
	if !d.Fenced() {
		if err := pc.Reserve(ctx, d.Ref); err != nil {
			return d, fmt.Errorf("device %s: Placement shows it reserved %d/%d; setting reserved=total before the release failed: %w (nothing released: the device stays quarantined; run the command again)",
				d.Ref, d.Inventory.Reserved, d.Inventory.Total, err)
		}
		if d, err = readBack(ctx, pc, d); err != nil {
			return d, fmt.Errorf("%w (nothing released: the device stays quarantined; run the command again)", err)
		}
		if !d.Fenced() {
			return d, fmt.Errorf("device %s: Placement still shows it reserved %d/%d after scour set reserved=total (something lowers it: check its inventory); nothing released: the device stays quarantined",
				d.Ref, d.Inventory.Reserved, d.Inventory.Total)
		}
		fmt.Fprintf(w, "set reserved=total (%d/%d) on %s before the release\n", d.Inventory.Reserved, d.Inventory.Total, d.Ref)
	}
	if recorded {
		if _, err := store.ReleaseQuarantine(ctx, cfg.Host, d.UUID, operatorName(), "scourctl placement unquarantine"); err != nil {
			return d, err
		}
		fmt.Fprintf(w, "released the quarantine recorded by run %s (%s) in the claims store\n", q.RunID, q.Reason)
	}
	if d.Quarantined {
		if err := pc.Unquarantine(ctx, d.Ref); err != nil {
			return d, err
		}
		fmt.Fprintf(w, "removed trait %s from %s\n", cfg.Placement.QuarantineTrait, d.Ref)
	}
	now, err := readBack(ctx, pc, d)
	if err != nil {
		return d, err
	}
	if !now.Fenced() {
		return now, fmt.Errorf("device %s: Placement shows it reserved %d/%d after the release: something lowered reserved meanwhile; fence it again with scourctl clean %s before Nova schedules it",
			now.Ref, now.Inventory.Reserved, now.Inventory.Total, now.Address)
	}
	fmt.Fprintf(w, "Placement shows the device still reserved (%d/%d), quarantine trait %v: it is dirty, not available.\n",
		now.Inventory.Reserved, now.Inventory.Total, now.Quarantined)
	return now, nil
}

// readBack reads d again from this host's tree, with its traits.
func readBack(ctx context.Context, pc unquarantinePlacement, d placement.Device) (placement.Device, error) {
	res, err := pc.Scan(ctx)
	if err != nil {
		return d, fmt.Errorf("device %s: reading it back from Placement: %w", d.Ref, err)
	}
	now, err := admin.FindDevice(res.Devices, d.UUID)
	if err != nil {
		return d, fmt.Errorf("device %s: reading it back from Placement: %w", d.Ref, err)
	}
	return now, nil
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
