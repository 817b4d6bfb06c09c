package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/placement"
)

func init() {
	register(func(c *cli) *cobra.Command {
		return &cobra.Command{
			Use:   "status",
			Short: "per device of this host: Placement state, last cleaning verdict, open run",
			Long: `For each one-time-use device of this host (scourd's config: host, Placement,
claims store): its Placement state and reserved/total, the verdict of its
last finished cleaning run, and the cleaning run open now, if any.

Columns: ` + joinKeys(statusColumns),
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cfg, pc, err := c.placement(cmd.Context())
				if err != nil {
					return err
				}
				l, err := statusListing(cmd.Context(), cfg, pc)
				if err != nil {
					return err
				}
				return c.out.write(c.stdout, l)
			},
		}
	})
}

var statusColumns = []string{"address", "state", "reserved", "last_run", "verdict", "ended", "open_run"}

// statusListing joins this host's Placement scan with its cleaning runs.
func statusListing(ctx context.Context, cfg *config.Config, pc *placement.Client) (*listing, error) {
	scan, err := pc.Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("scanning host %s in Placement: %w", cfg.Host, err)
	}
	s, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()))
	if err != nil {
		return nil, fmt.Errorf("claims store: %w", err)
	}
	defer s.Close()
	l := newListing(statusColumns...)
	for _, d := range scan.Devices {
		runs, err := s.ListRuns(ctx, claims.RunFilter{Host: cfg.Host, Device: d.UUID, Limit: 20})
		if err != nil {
			return nil, fmt.Errorf("cleaning runs of %s: %w", d.Ref, err)
		}
		last, verdict, ended, open := "", "", "", ""
		for _, r := range runs {
			switch {
			case !r.Finished() && open == "":
				open = fmt.Sprintf("%s (since %s)", r.ID, r.StartedAt.Format("2006-01-02T15:04:05Z07:00"))
			case r.Finished() && last == "":
				last, verdict, ended = r.ID, string(r.State), timeText(r.EndedAt)
			}
		}
		state := string(d.State)
		if d.Why != "" {
			state += " (" + d.Why + ")"
		}
		l.add(string(d.Address), state, fmt.Sprintf("%d/%d", d.Inventory.Reserved, d.Inventory.Total), last, verdict, ended, open)
	}
	return l, nil
}
