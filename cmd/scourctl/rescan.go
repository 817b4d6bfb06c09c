package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/admin"
)

// The commands that act through scourd's admin socket.
func init() {
	register(func(c *cli) *cobra.Command {
		return &cobra.Command{
			Use:   "rescan",
			Short: "make scourd scan this host's devices in Placement now",
			Long: `Asks scourd, over its admin socket, to scan Placement now instead of at its
next lifecycle.reconcile_interval: after fixing a device's problem, after an
unquarantine, after a Placement change.`,
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, host, err := c.adminClient()
				if err != nil {
					return err
				}
				if err := cl.Rescan(cmd.Context(), "scourctl rescan by "+operatorName()); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "scourd on %s scans now; follow it with: scourctl status\n", host)
				return nil
			},
		}
	})
	register(func(c *cli) *cobra.Command {
		return &cobra.Command{
			Use:   "clean DEVICE",
			Short: "have scourd clean a device now (PCI address or resource provider UUID)",
			Long: `Asks scourd, over its admin socket, to clean DEVICE now: a device nobody
holds is reserved in Placement (so Nova cannot schedule it meanwhile) and
cleaned with its full pipeline; it returns to the pool only after a clean
run. A device in use by an instance, or quarantined, is refused.`,
			Args: exactArgs(1, "one DEVICE (PCI address or resource provider UUID)"),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, _, err := c.adminClient()
				if err != nil {
					return err
				}
				msg, err := cl.Clean(cmd.Context(), args[0], operatorName())
				if err != nil {
					return err
				}
				fmt.Fprint(c.stdout, msg)
				return nil
			},
		}
	})
	register(func(c *cli) *cobra.Command {
		var reason string
		var noWipe bool
		cmd := &cobra.Command{
			Use:   "retire DEVICE --reason TEXT [--no-wipe]",
			Short: "keep a device out of the pool, recorded with a reason (undo: placement unquarantine)",
			Long: `Asks scourd, over its admin socket, to retire DEVICE: it is reserved in
Placement with the quarantine trait, and the claims store records who
retired it and why; scourd never cleans or returns it until an operator
releases it with scourctl placement unquarantine DEVICE. A device in use
leaves the pool when its instance releases it.

A device not cleaned since its last tenant (in use, or released and not
yet cleaned) is wiped before it leaves: scourd runs the retirement wipe
of its pipeline (retire_wipe, or for an NVMe the strongest erase it
supports) once no instance holds it, keeping it reserved and quarantined
throughout, as for a drive a cleaning step retires (worn). The command
returns when the retirement is recorded; scourctl status and scourctl
records list --device DEVICE show the outcome: wiped, with its technique,
or RETIRED UNWIPED (the wipe could not erase it: destroy it). A device
cleaned since its last tenant is not wiped again.

--no-wipe retires a device without wiping it, for one that is being
physically destroyed: it is recorded NOT WIPED (operator chose
--no-wipe) and counted unwiped, which alerts (ScourDeviceRetiredUnwiped).
See docs/pipelines.md, Retirement.`,
			Args: exactArgs(1, "one DEVICE (PCI address or resource provider UUID)"),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, _, err := c.adminClient()
				if err != nil {
					return err
				}
				msg, err := cl.Retire(cmd.Context(), args[0], operatorName(), reason, noWipe)
				if err != nil {
					return err
				}
				fmt.Fprint(c.stdout, msg)
				return nil
			},
		}
		cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the device; required)")
		_ = cmd.MarkFlagRequired("reason")
		cmd.Flags().BoolVar(&noWipe, "no-wipe", false, "do not wipe a device not cleaned since its last tenant (it is being destroyed): recorded NOT WIPED, and alerts")
		return cmd
	})
}

// adminClient reads scourd's config for its admin socket and host.
func (c *cli) adminClient() (*admin.Client, string, error) {
	cfg, err := c.loadConfig(false)
	if err != nil {
		return nil, "", err
	}
	return admin.NewClient(adminSocket(cfg)), cfg.Host, nil
}
