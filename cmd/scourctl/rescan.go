package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/admin"
)

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
				cfg, err := c.loadConfig(false)
				if err != nil {
					return err
				}
				if err := admin.NewClient(adminSocket(cfg)).Rescan(cmd.Context(), "scourctl rescan by "+operatorName()); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "scourd on %s scans now; follow it with: scourctl status\n", cfg.Host)
				return nil
			},
		}
	})
}
