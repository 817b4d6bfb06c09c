package placement

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// errNoSuchTrait marks a 400 naming traits Placement does not know: a
// listing filtering on one, or a trait write carrying one. Scour's
// CUSTOM_ traits exist because scour created them, but Placement's
// database can be rebuilt under a running scour (restored from an old
// backup, re-created empty and refilled by nova-compute), and then they
// are gone until created again.
var errNoSuchTrait = errors.New("Placement does not know the trait")

// noSuchTraitRE reads the names from Placement's two wordings: "No such
// trait(s): A, B." (listings, TraitNotFound) and "No such trait A, B"
// (PUT /resource_providers/{uuid}/traits).
var noSuchTraitRE = regexp.MustCompile(`No such trait(?:\(s\))?:? ([A-Z0-9_, ]+)`)

// missingTraits returns the trait names an errNoSuchTrait names.
func missingTraits(err error) []string {
	var api *APIError
	if !errors.As(err, &api) {
		return nil
	}
	m := noSuchTraitRE.FindStringSubmatch(api.Detail)
	if m == nil {
		return nil
	}
	var out []string
	for _, n := range strings.Split(m[1], ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// ensureTrait creates a CUSTOM_ trait once per client (PUT /traits/NAME is
// idempotent: 201 created, 204 existed). recreateTraits forgets what was
// created when Placement says a trait is missing.
func (c *Client) ensureTrait(ctx context.Context, name string) error {
	c.mu.Lock()
	ok := c.traitsOK[name]
	c.mu.Unlock()
	if ok || !isCustom(name) {
		return nil
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		return c.do(ctx, http.MethodPut, "traits/"+name, nil, nil, http.StatusCreated, http.StatusNoContent)
	}, "trait", name)
	if err != nil {
		return fmt.Errorf("creating trait %s: %w", name, err)
	}
	c.mu.Lock()
	c.traitsOK[name] = true
	c.mu.Unlock()
	return nil
}

// recreateTraits handles an errNoSuchTrait: it forgets every trait this
// client created (one missing means Placement's trait table was lost, so
// the others are suspect too), creates the missing CUSTOM_ ones again,
// counts and logs it, and returns nil when the request may be repeated.
// A missing standard trait cannot be created through the API: the error
// names the setting that names it.
func (c *Client) recreateTraits(ctx context.Context, err error) error {
	names := missingTraits(err)
	if len(names) == 0 {
		return err
	}
	c.mu.Lock()
	clear(c.traitsOK)
	c.mu.Unlock()
	var std []string
	for _, n := range names {
		if !isCustom(n) {
			std = append(std, n)
			continue
		}
		if cerr := c.ensureTrait(ctx, n); cerr != nil {
			return fmt.Errorf("%w (creating it again: %w)", err, cerr)
		}
		c.metrics.traitsRecreated.Inc()
		c.log.Warn("trait missing from Placement (its database rebuilt or restored?); created it again", "trait", n, "setting", c.traitSetting(n))
	}
	if len(std) > 0 {
		return fmt.Errorf("%w: standard trait(s) %s unknown to this Placement (its os-traits is too old); set %s to a trait Placement knows, e.g. a CUSTOM_ one the [pci] device_spec traits tag adds",
			err, strings.Join(std, ", "), c.traitSetting(std[0]))
	}
	return nil
}

// traitSetting names the configuration key that names trait t.
func (c *Client) traitSetting(t string) string {
	switch t {
	case c.cfg.OneTimeUseTrait:
		return "placement.one_time_use_trait"
	case c.cfg.QuarantineTrait:
		return "placement.quarantine_trait"
	}
	if c.cfg.Cyborg.Enabled && slices.Contains(c.cfg.Cyborg.Traits, t) {
		return "placement.cyborg.traits"
	}
	return "none (a trait scour wrote)"
}

// withTraits runs f, a request that filters on or writes traits; when
// Placement says some are missing it creates them again (recreateTraits)
// and runs f once more.
func (c *Client) withTraits(ctx context.Context, f func(context.Context) error) error {
	err := f(ctx)
	if !errors.Is(err, errNoSuchTrait) {
		return err
	}
	if rerr := c.recreateTraits(ctx, err); rerr != nil {
		return rerr
	}
	return f(ctx)
}
