package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
)

func init() {
	register(func(c *cli) *cobra.Command {
		return &cobra.Command{
			Use:   "status",
			Short: "per device of this host: Placement state, last cleaning verdict, open run with its step, percent and ETA",
			Long: `For each one-time-use device of this host: its Placement state and
reserved/total, the verdict of its last finished cleaning run, and the run
open now with its current step, the step's progress and when it should end
at its pace so far; held: why the store keeps the device out of the pool
(a quarantine verdict, or an operator's retirement with its reason).

scourctl asks scourd over its admin socket (admin.socket, default
/run/scour/scourd.sock; root or admin.group), so no Keystone credentials
are needed. When scourd does not run, it reads Placement (with scourd's
credentials) and the store itself.

Columns: ` + joinKeys(statusColumns),
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg, err := c.loadConfig(false)
				if err != nil {
					return err
				}
				st, err := admin.NewClient(adminSocket(cfg)).Status(cmd.Context())
				if errors.Is(err, admin.ErrNotRunning) {
					fmt.Fprintf(c.stderr, "scourctl status: %v; reading Placement and the store directly\n", err)
					st, err = statusDirect(cmd.Context(), c, cfg)
				}
				if err != nil {
					return err
				}
				return c.out.write(c.stdout, statusListing(st))
			},
		}
	})
}

// adminSocket is scourd's admin socket for cfg.
func adminSocket(cfg *config.Config) string {
	if cfg.Admin.Socket != "" {
		return cfg.Admin.Socket
	}
	return admin.DefaultSocket
}

var statusColumns = []string{"address", "state", "reserved", "last_run", "verdict", "ended", "open_run", "step", "percent", "eta", "held"}

func statusListing(st []admin.DeviceStatus) *listing {
	l := newListing(statusColumns...)
	for _, d := range st {
		open := ""
		if d.OpenRun != "" {
			open = fmt.Sprintf("%s (since %s)", d.OpenRun, d.OpenSince.Format(time.RFC3339))
		}
		percent := ""
		if d.Percent != nil {
			percent = fmt.Sprintf("%d%%", *d.Percent)
		}
		l.add(d.Address, d.State, fmt.Sprintf("%d/%d", d.Reserved, d.Total), d.LastRun, d.Verdict, timeText(d.Ended),
			open, d.Step, percent, timeText(d.ETA), d.Held)
	}
	return l
}

// statusDirect computes the status as scourd would: a Placement scan
// (scourd's credentials) joined with the store.
func statusDirect(ctx context.Context, c *cli, cfg *config.Config) ([]admin.DeviceStatus, error) {
	pc, err := c.placementClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	scan, err := pc.Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("scanning host %s in Placement: %w", cfg.Host, err)
	}
	s, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()))
	if err != nil {
		return nil, fmt.Errorf("claims store: %w", err)
	}
	defer s.Close()
	return admin.Status(ctx, scan.Devices, s, cfg.Host, time.Now())
}
