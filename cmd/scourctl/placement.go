package main

import (
	"cmp"
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
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/backend"
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
	var orphan orphanRelease
	cmd := &cobra.Command{
		Use:   "unquarantine RP-UUID|ADDRESS | --rp RP-UUID",
		Short: "remove the quarantine or retirement from one device of this host (refused unless it has one)",
		Long:  unquarantineHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("rp") {
				return noArgs(cmd, args)
			}
			return exactArgs(1, "one RP-UUID or PCI address")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, pc, err := c.placement(cmd.Context())
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("rp") {
				return placementUnquarantineOrphan(cmd.Context(), pc, cfg, orphan, c.stdout)
			}
			return placementUnquarantine(cmd.Context(), pc, cfg, args[0], c.stdout)
		},
	}
	cmd.Flags().StringVar(&orphan.rp, "rp", "", "release the store's quarantine of a provider that is no longer in this host's Placement tree (refused while it is, while a provider is at its address, while a PCI device is at it, or when it has none)")
	cmd.Flags().StringVar(&orphan.why, "reason", "", "why (recorded with the release; with --rp)")
	cmd.Flags().BoolVar(&orphan.force, "force", false, "with --rp: release even though a PCI device is at the quarantine's address or it has none (needs --reason; only for a card never offered to tenants again from this host)")
	return cmd
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
returned: a recoverable failure of it quarantines the device again at once.

--rp RP-UUID releases a quarantine (or retirement) that only the claims
store holds: its provider is no longer in this host's Placement tree and
no provider is at its PCI address (a retired device removed from
[pci] device_spec for an RMA, a dead card pulled). Nothing is written to
Placement. It is refused while the provider is in the tree, or while a
provider is at its address (scourd moves the quarantine to that one:
release it with scourctl placement unquarantine ADDRESS). It is also
refused while this host's hardware discovery finds a PCI device at the
address, or when the quarantine records no address: a provider missing
from the tree is not a card gone from the host, and a provider Nova
re-creates starts unreserved with no quarantine to follow it, so the card
would reach the pool uncleaned. Pull the card first (RMA), or fix the
provider and let scourd move the quarantine to it. --force releases past
these two refusals, only with --reason; it is right only for a card never
offered to tenants again from this host. The release is recorded with
who ran it and why (--reason, and what --force overrode).`

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
		return placement.Device{}, fmt.Errorf("%w (a quarantine whose provider is gone from this host's Placement tree is released with scourctl placement unquarantine --rp RP-UUID)", err)
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

// placementUnquarantineOrphan releases the store's quarantine of rp, a
// provider gone from this host's tree with none at its address and no
// PCI device there either (or force, with why).
func placementUnquarantineOrphan(ctx context.Context, pc *placement.Client, cfg *config.Config, o orphanRelease, w io.Writer) error {
	store, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()))
	if err != nil {
		return fmt.Errorf("opening the claims store (where quarantines are recorded): %w", err)
	}
	defer store.Close()
	be, err := backend.Open(cfg.Hardware, quietLog())
	if err != nil {
		return fmt.Errorf("opening hardware discovery (to check that no PCI device is at the quarantine's address): %w", err)
	}
	if err := unquarantineOrphan(ctx, pc, store, hardware.Presence{Backend: be}, cfg, o, w); err != nil {
		return err
	}
	if err := admin.NewClient(adminSocket(cfg)).Rescan(ctx, "release of orphaned quarantine "+o.rp+" by "+operatorName()); err != nil {
		fmt.Fprintf(w, "could not ask scourd to scan now (%v); scour_lifecycle_quarantines_orphaned drops at its next scan\n", err)
	}
	return nil
}

// orphanRelease is what unquarantine --rp was asked: the provider, why,
// and whether to release past the hardware checks.
type orphanRelease struct {
	rp, why string
	force   bool
}

// orphanStore is what releasing an orphaned quarantine asks of the
// claims store.
type orphanStore interface {
	OpenQuarantines(ctx context.Context, host string) ([]claims.Quarantine, error)
	ReleaseQuarantine(ctx context.Context, host, deviceRP, by, reason string) (bool, error)
}

// presence is this host's hardware discovery (hardware.Presence).
type presence interface {
	Present(ctx context.Context, addr hardware.Address) (bool, error)
}

// unquarantineOrphan releases the open quarantine of rp that only the
// store holds: rp is not in this host's tree and no provider is at the
// quarantine's address. Either one in the tree would be the device (the
// scan moves a quarantine to the provider at its address): then the
// ordinary unquarantine, which fences it first, is the way, and this
// refuses. A provider missing from the tree is not a card gone from the
// host (a device_spec mistake, report_in_placement toggled, the trait
// dropped): when Nova re-creates it, it starts unreserved and the
// released quarantine is not there to follow it, so the card would reach
// the pool uncleaned. So it also refuses, unless forced, when the
// quarantine has no address or hardware discovery finds a PCI device at
// it (safety rule 3). It writes nothing to Placement. The tree is read
// again after the release: a provider that came back at the address
// meanwhile is reported, with what to do.
func unquarantineOrphan(ctx context.Context, pc unquarantinePlacement, store orphanStore, hw presence, cfg *config.Config, o orphanRelease, w io.Writer) error {
	rp := o.rp
	if rp == "" {
		return usagef("--rp needs the provider's UUID (scourctl status, or the WARN line naming the orphaned quarantine)")
	}
	if o.force && strings.TrimSpace(o.why) == "" {
		return usagef("--force needs --reason: why the device may go without its quarantine (it is recorded with the release)")
	}
	atAddress := func(devs []placement.Device, addr string) (placement.Device, bool) {
		for _, d := range devs {
			if d.UUID == rp || (addr != "" && string(d.Address) == addr) {
				return d, true
			}
		}
		return placement.Device{}, false
	}
	open, err := store.OpenQuarantines(ctx, cfg.Host)
	if err != nil {
		return err
	}
	var q claims.Quarantine
	found := false
	for _, o := range open {
		if o.DeviceRP == rp {
			q, found = o, true
		}
	}
	if !found {
		return fmt.Errorf("provider %s has no open quarantine on host %s: nothing to release (scourctl status lists this host's quarantines)", rp, cfg.Host)
	}
	res, err := pc.Scan(ctx)
	if err != nil {
		return err
	}
	if d, in := atAddress(res.Devices, q.Address); in {
		if d.UUID == rp {
			return fmt.Errorf("provider %s is in host %s's Placement tree (device %s at %s): refusing; release it with scourctl placement unquarantine %s, which fences it first",
				rp, cfg.Host, d.Name, d.Address, d.Address)
		}
		return fmt.Errorf("provider %s is not in host %s's Placement tree, but provider %s (%s) is at its address %s: that is the device now, and scourd moves the quarantine to it at its next scan; refusing; release it with scourctl placement unquarantine %s once it has (after an RMA: once the replacement card is in)",
			rp, cfg.Host, d.UUID, d.Name, d.Address, d.Address)
	}
	hwDoubt, err := orphanHardwareDoubt(ctx, hw, q.Address)
	if err != nil {
		return err
	}
	if hwDoubt != "" && !o.force {
		return fmt.Errorf("provider %s is not in host %s's Placement tree, but %s: refusing; if its provider comes back (a [pci] device_spec mistake, report_in_placement toggled, the one-time-use trait dropped), Nova creates it unreserved and the quarantine would not be there to follow it, so the card would reach the pool uncleaned. Fix the provider instead: scourd moves the quarantine to it. --force --reason \"...\" releases it anyway (recorded): right only when the card will never be offered to tenants again from this host, or is not the quarantined card",
			rp, cfg.Host, hwDoubt)
	}
	kind := "quarantine of run " + q.RunID
	if q.Retired() {
		kind = "retirement"
	}
	addr := cmp.Or(q.Address, "unknown")
	reason := fmt.Sprintf("scourctl placement unquarantine --rp: provider not in host %s's Placement tree, none at address %s", cfg.Host, addr)
	if hwDoubt != "" {
		reason = fmt.Sprintf("scourctl placement unquarantine --rp --force: provider not in host %s's Placement tree, none at address %s, but %s", cfg.Host, addr, hwDoubt)
	}
	if o.why != "" {
		reason += "; " + o.why
	}
	released, err := store.ReleaseQuarantine(ctx, cfg.Host, rp, operatorName(), reason)
	if err != nil {
		return err
	}
	if !released {
		return fmt.Errorf("provider %s's quarantine was closed or moved meanwhile (a provider at its address came back?): nothing released; check scourctl status", rp)
	}
	fmt.Fprintf(w, "released the %s (%s) of provider %s, address %s, in the claims store; nothing written to Placement\n", kind, q.Reason, rp, addr)
	if res, err = pc.Scan(ctx); err != nil {
		return fmt.Errorf("released; reading host %s's Placement tree again to check that no provider came back at %s meanwhile: %w (check it with scourctl placement scan)", cfg.Host, addr, err)
	}
	if d, in := atAddress(res.Devices, q.Address); in {
		return fmt.Errorf("released, but provider %s (%s) appeared at address %s meanwhile, now without the quarantine: keep it out of the pool with scourctl retire %s --reason ..., or have it cleaned with scourctl clean %s",
			d.UUID, d.Name, d.Address, d.Address, d.Address)
	}
	return nil
}

// orphanHardwareDoubt says why this host's hardware may still hold the
// quarantined device at addr ("" when discovery finds none there).
func orphanHardwareDoubt(ctx context.Context, hw presence, addr string) (string, error) {
	if addr == "" {
		return "the quarantine records no PCI address, so nothing shows that the card left this host", nil
	}
	a, err := hardware.ParseAddress(addr)
	if err != nil {
		return fmt.Sprintf("its recorded address %q is no PCI address (%v)", addr, err), nil
	}
	ok, err := hw.Present(ctx, a)
	if err != nil {
		return "", fmt.Errorf("checking that no PCI device is at the quarantine's address %s: %w; nothing released (run again once scourctl devices %s works)", addr, err, addr)
	}
	if ok {
		return fmt.Sprintf("hardware discovery finds a PCI device at its address %s (the card is still in this host)", addr), nil
	}
	return "", nil
}
