package config

import (
	"context"
	"fmt"
	"strings"
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
		"or, only where nova-compute's host is %s, set host: %s (%s's records then stay under %s and its open runs and quarantines are not taken over); "+
		"on a claims database shared by many hosts, first make sure %s is not another machine's host name: taking it would take over that host's records",
		ErrInvalid, short, cfg.Host, short, short, cfg.Host, cfg.Host, short, short, short)
}
