package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/config"
)

func init() {
	register(func(c *cli) *cobra.Command {
		adopt := &cobra.Command{
			Use:   "adopt OLD-HOST",
			Short: "move a renamed host's open quarantines, runs and claims to this host's name (scourd stopped)",
			Long:  hostAdoptHelp,
			Args:  exactArgs(1, "the host name scourd ran under before (OLD-HOST)"),
			RunE: func(cmd *cobra.Command, args []string) error {
				cfg, err := c.loadConfig(false)
				if err != nil {
					return err
				}
				return hostAdopt(cmd.Context(), cfg, args[0], c.stdout)
			},
		}
		return group("host", "this host's name in the claims store (host adopt OLD-HOST)", hostAdoptHelp, adopt)
	})
}

const hostAdoptHelp = `Every row of the claims store is keyed by host, so a scourd whose host
changed (scour.yaml's host, SCOUR_HOST) does not see what it recorded
under its old name: its open quarantines and retirements, its open
cleaning runs, its instances' claims and the previous tenants of its
devices. scourd refuses to start while the store holds such open records
under a name that was this machine's (docs/operations.md, Renaming a host).

host adopt OLD-HOST, run with scourd stopped and with the configuration it
will start with (the new host), moves them to that host in one
transaction: open quarantines and retirements, open cleaning runs
(resumed by scourd), live claims, and the previous tenants no clean has
covered since (released claims, seen holders; a device whose run was
closed as possibly used after its clean is recorded held by an unknown
tenant), with the devices' addresses, Cyborg ARQ records and delete
tombstones. Closed records and OLD-HOST's signed record chain stay under
OLD-HOST (scourctl records verify --host OLD-HOST). Nothing is written to
Placement.

Where scourd already ran under the new name (a rename from before scourd
checked for one), both names may hold one device or instance open; the
new name's record stands and OLD-HOST's is closed, keeping what it held:
a quarantine of a device the new name holds quarantined gives its reason
(and a retirement's pending wipe) to the new name's; an open run of a
device the new name cleans too ends as superseded (as possibly used
after its clean when an un-reserve PUT of it may have landed, so the
device stays held); a live claim of an instance the new name holds one of
gives it the devices and volumes it lacks. Records it closes are signed
with this host's record key (claims.signing_key) under OLD-HOST's chain.

Only a name that was this machine's is adopted: any other name in a sqlite
store (one scourd at a time uses a state_path), and on PostgreSQL a name
whose claims were recorded for this host's node. It is refused while
scourd runs (it takes this host's lock, on PostgreSQL OLD-HOST's too).`

// hostAdopt moves old's open records to cfg.Host (claims.AdoptHost),
// holding both names' locks, once the store says old was this machine's;
// the records it closes are signed with the host's key when it has one.
func hostAdopt(ctx context.Context, cfg *config.Config, old string, w io.Writer) error {
	if old == cfg.Host {
		return usagef("OLD-HOST is this host's name (%s): give the name scourd ran under before", old)
	}
	// Closing OLD-HOST's superseded runs seals their records: signed,
	// as scourd would, so records verify finds no unsigned one after
	// signing began.
	opts := []claims.Option{claims.ReadOnlySchema(), claims.WithLogger(quietLog()), claims.WithHostLock(cfg.Host),
		claims.WithChainHead(func(h claims.ChainHead) {
			doc, _ := json.Marshal(h)
			fmt.Fprintf(w, "record chain of host %s advanced (a superseded run closed): %s\n", h.Host, doc)
		})}
	signer, signs, err := claims.LoadKey(cfg.Claims.SigningKeyPath())
	if err != nil {
		return fmt.Errorf("%w (claims.signing_key)", err)
	}
	if signs {
		opts = append(opts, claims.WithSigner(signer))
	}
	store, err := claims.Open(ctx, cfg.Claims, opts...)
	if err != nil {
		return fmt.Errorf("opening the claims store for host %s (stop scourd first): %w", cfg.Host, err)
	}
	defer store.Close()
	if cfg.Claims.Driver == claims.DriverPostgres {
		oldLock, err := claims.Open(ctx, cfg.Claims, claims.ReadOnlySchema(), claims.WithLogger(quietLog()), claims.WithHostLock(old))
		if err != nil {
			return fmt.Errorf("taking host %s's lock (a scourd still running as %s must be stopped first): %w", old, old, err)
		}
		defer oldLock.Close()
	}
	others, err := store.OpenUnderOtherNames(ctx, cfg.Host, cfg.Nodes())
	if err != nil {
		return err
	}
	var found *claims.HostOpen
	for i := range others {
		if others[i].Host == old {
			found = &others[i]
		}
	}
	if found == nil {
		return fmt.Errorf("host %s holds no open quarantine, run, claim or uncovered tenant that is this machine's (on PostgreSQL: none of its claims names node %s): nothing to adopt; refusing to take another machine's records",
			old, cfg.Node)
	}
	a, err := store.AdoptHost(ctx, old, cfg.Host, operatorName())
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "moved from host %s to host %s: %d open quarantines or retirements, %d open cleaning runs, %d live claims, %d earlier claims of tenants no clean has covered",
		old, cfg.Host, a.Quarantines, a.Runs, a.Claims, a.Tenants)
	if a.Uncovered > 0 {
		fmt.Fprintf(w, "; %d devices recorded held under %s by a tenant no clean of %s covered", a.Uncovered, cfg.Host, old)
	}
	if a.Superseded > 0 {
		fmt.Fprintf(w, "; %d quarantines of devices %s holds quarantined already closed under %s (their reasons added to %s's)", a.Superseded, cfg.Host, old, cfg.Host)
	}
	if a.RunsSuperseded > 0 {
		fmt.Fprintf(w, "; %d open runs of devices %s cleans too closed under %s as superseded (%d of them as possibly used after their clean: an un-reserve may have landed)",
			a.RunsSuperseded, cfg.Host, old, a.RunsUsed)
	}
	if a.ClaimsMerged > 0 {
		fmt.Fprintf(w, "; %d live claims of instances %s holds a claim of merged into %s's and released under %s", a.ClaimsMerged, cfg.Host, cfg.Host, old)
	}
	fmt.Fprintf(w, "\nclosed records and %s's record chain stay under %s; start scourd as %s\n", old, old, cfg.Host)
	return nil
}
