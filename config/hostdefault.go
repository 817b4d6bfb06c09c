package config

import (
	"context"
	"fmt"
	"strings"

	"github.com/scour-project/scour/claims"
)

// HostRecords is what CheckDefaultHost asks the claims store.
type HostRecords interface {
	HostHasRecords(ctx context.Context, host string) (bool, error)
}

// CheckDefaultHost refuses scourd's start when host took its default, the
// hostname uncut, that hostname is an FQDN, and the store holds rows of
// the short name (scour's default before 0.2) but none of the FQDN: an
// upgraded scourd would otherwise take a new identity silently (another
// host queue, Placement node, claims and records) and lose sight of its
// open runs, quarantines, previous tenants and record chain. Setting host
// (scour.yaml or SCOUR_HOST) skips the check.
func (cfg *Config) CheckDefaultHost(ctx context.Context, store HostRecords) error {
	short, _, cut := strings.Cut(cfg.Host, ".")
	if !cfg.HostDefaulted || !cut || short == "" {
		return nil
	}
	if full, err := store.HostHasRecords(ctx, cfg.Host); err != nil || full {
		return err
	}
	old, err := store.HostHasRecords(ctx, short)
	if err != nil || !old {
		return err
	}
	return fmt.Errorf("%w: host: the claims store holds host %s's records and none of %s, the hostname that host now defaults to "+
		"(scour's default host was the short hostname before scour 0.2); set host: %s in scour.yaml (or SCOUR_HOST=%s; "+
		"it must equal nova-compute's [DEFAULT] host) to keep this host's claims, open runs, quarantines and record chain, "+
		"or, only where nova-compute's host is %s, set host: %s and move %s's open records to it with scourctl host adopt %s (scourd refuses to start under %s while %s holds open quarantines, runs or claims, or tenants no clean covered); "+
		"on a claims database shared by many hosts, first make sure %s is not another machine's host name: taking it would take over that host's records",
		ErrInvalid, short, cfg.Host, short, short, cfg.Host, cfg.Host, short, short, cfg.Host, short, short)
}

// Nodes names this host's compute node: node, and placement.node when it
// differs (claims record the first, the Placement tree is the second's).
func (cfg *Config) Nodes() []string {
	if cfg.Placement.Node != "" && cfg.Placement.Node != cfg.Node {
		return []string{cfg.Node, cfg.Placement.Node}
	}
	return []string{cfg.Node}
}

// RenamedHosts is what CheckRenamedHost asks the claims store.
type RenamedHosts interface {
	OpenUnderOtherNames(ctx context.Context, host string, nodes []string) ([]claims.HostOpen, error)
}

// CheckRenamedHost refuses scourd's start under host when the claims
// store holds open quarantines or retirements, open cleaning runs, live
// claims, or devices holding a tenant no clean covered (that host does
// not know of) under another host name that was this machine's (a sqlite
// store of this state_path; on PostgreSQL, a name whose claims name this
// scourd's node): every row is keyed by host, so under the new name
// scourd would not see them. Nova rewrites a device's traits to its own
// set, and the store's quarantine is what puts the quarantine trait and
// reserved = total back: without it a retired or failed device would be
// cleaned and returned to the pool (rule 4), and a device's previous
// tenants would be lost to its re-fence and record (rule 1). The way out
// is to set host back, or to move the records (scourctl host adopt).
func (cfg *Config) CheckRenamedHost(ctx context.Context, store RenamedHosts) error {
	others, err := store.OpenUnderOtherNames(ctx, cfg.Host, cfg.Nodes())
	if err != nil || len(others) == 0 {
		return err
	}
	var held, names, adopt []string
	for _, o := range others {
		held = append(held, fmt.Sprintf("host %s (%s): %d open quarantines or retirements, %d open cleaning runs, %d live claims, %d devices holding a tenant no clean covered",
			o.Host, o.Why, o.Quarantines, o.Runs, o.Claims, o.Uncovered))
		names = append(names, o.Host)
		adopt = append(adopt, "scourctl host adopt "+o.Host)
	}
	return fmt.Errorf("%w: host: scourd would start as %s over a claims store holding the open records of this machine under another host name: %s. "+
		"Under %s it would not see them: a quarantined or retired device whose trait Nova rewrites away would be cleaned and returned to the pool, "+
		"an open run would not resume, and the devices' previous tenants would be lost. "+
		"If nova-compute's [DEFAULT] host is still %s, set host: %s in scour.yaml (or SCOUR_HOST); "+
		"if it is now %s, stop scourd and run %s (with this configuration), which moves those records to %s, then start scourd "+
		"(docs/operations.md, Renaming a host)",
		ErrInvalid, cfg.Host, strings.Join(held, "; "), cfg.Host, strings.Join(names, " or "), strings.Join(names, " or "),
		cfg.Host, strings.Join(adopt, ", then "), cfg.Host)
}
