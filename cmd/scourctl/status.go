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
	"github.com/scour-project/scour/placement"
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

When Placement does not answer (or scourctl has no credentials for it),
status lists what the local claims store knows: the devices with an open
run or an open quarantine (state "` + admin.StatePlacementUnknown + `",
reserved "?"), warns on stderr why Placement's view is missing, and exits
0. A store that cannot be read is an error (exit 1).

Columns: ` + joinKeys(statusColumns),
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg, err := c.loadConfig(false)
				if err != nil {
					return err
				}
				rep, err := admin.NewClient(adminSocket(cfg)).Status(cmd.Context())
				if errors.Is(err, admin.ErrNotRunning) {
					fmt.Fprintf(c.stderr, "scourctl status: %v; reading Placement and the store directly\n", err)
					rep, err = statusDirect(cmd.Context(), c, cfg)
				}
				if err != nil {
					return err
				}
				if rep.PlacementError != "" {
					fmt.Fprintf(c.stderr, "scourctl status: warning: Placement's view is missing (%s): "+
						"listing only what the local claims store knows, this host's open runs and quarantines; "+
						"state and reserved are unknown and devices with neither are not listed\n", rep.PlacementError)
				}
				return c.out.write(c.stdout, statusListing(rep.Devices))
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
		reserved := fmt.Sprintf("%d/%d", d.Reserved, d.Total)
		if d.PlacementUnknown {
			reserved = "?"
		}
		l.add(d.Address, d.State, reserved, d.LastRun, d.Verdict, timeText(d.Ended),
			open, d.Step, percent, timeText(d.ETA), d.Held)
	}
	return l
}

// statusDirect computes the status as scourd would: a Placement scan
// (scourd's credentials) joined with the store; the store's view alone,
// with why, when Placement cannot be asked. Only a store that cannot be
// read is an error.
func statusDirect(ctx context.Context, c *cli, cfg *config.Config) (admin.Report, error) {
	s, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()))
	if err != nil {
		return admin.Report{}, fmt.Errorf("claims store: %w", err)
	}
	defer s.Close()
	devs, perr := placementDevices(ctx, c, cfg)
	if perr != nil {
		st, err := admin.StoreStatus(ctx, s, cfg.Host, time.Now())
		return admin.Report{Devices: st, PlacementError: perr.Error()}, err
	}
	st, err := admin.Status(ctx, devs, s, cfg.Host, time.Now())
	return admin.Report{Devices: st}, err
}

// placementDevices scans this host's devices in Placement.
func placementDevices(ctx context.Context, c *cli, cfg *config.Config) ([]placement.Device, error) {
	pc, err := c.placementClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	scan, err := pc.Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("scanning host %s in Placement: %w", cfg.Host, err)
	}
	return scan.Devices, nil
}
