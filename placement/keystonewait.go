package placement

// An un-reserve that fails while Keystone does not answer waits for
// Keystone instead of handing the device to the reconciler's backoff.

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Between two probes of Keystone while an un-reserve waits for it: from
// keystoneProbeBase doubling up to keystoneProbeMax, so the device returns
// within keystoneProbeMax of Keystone answering again.
const (
	keystoneProbeBase    = time.Second
	keystoneProbeMax     = 30 * time.Second
	keystoneProbeTimeout = 10 * time.Second
)

// waitsForKeystone reports whether the un-reserve that failed with err
// should wait for Keystone: scour logs in to Keystone (no static token),
// the failure is transient (no answer, 5xx, a re-login Keystone did not
// answer) and no refusal of scour's credentials or role, and Keystone does
// not answer now. A cleaned device would otherwise wait for the
// reconciler's next scan after its backoff, and a scan while Keystone is
// still down fails too, leaving the device to the scan after
// lifecycle.reconcile_interval (an hour by default).
func (c *Client) waitsForKeystone(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || !IsRecoverable(err) || errors.Is(err, ErrCredentials) || errors.Is(err, ErrForbidden) {
		return false
	}
	return c.identityEndpoint() != "" && !c.keystoneAnswers(ctx)
}

func (c *Client) identityEndpoint() string {
	if c.cfg.Token != "" || c.sc == nil || c.sc.ProviderClient == nil {
		return ""
	}
	return c.sc.ProviderClient.IdentityEndpoint
}

// keystoneAnswers asks Keystone for its version document, without a token
// or credentials (no login: nothing counts toward its lockout). Any answer
// below 500 means Keystone is up: a re-login can be tried.
func (c *Client) keystoneAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, keystoneProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.identityEndpoint(), nil)
	if err != nil {
		return false
	}
	resp, err := c.sc.ProviderClient.HTTPClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < http.StatusInternalServerError
}

// waitForKeystone probes Keystone (bounded exponential backoff) until it
// answers, then returns nil: the caller repeats the un-reserve whole, with
// its reads and checks. It returns ctx's error when scourd stops first
// (the run's record resumes the un-reserve at the next start).
func (c *Client) waitForKeystone(ctx context.Context, dev Ref, cause error) error {
	c.log.Warn("Keystone does not answer, so the un-reserve cannot log in again: the device stays reserved and its un-reserve waits for Keystone, then re-reads and re-verifies the device (check Keystone)",
		append(dev.logAttrs(), "keystone", c.identityEndpoint(), "error", cause)...)
	start := c.now()
	wait := keystoneProbeBase
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if c.keystoneAnswers(ctx) {
			c.log.Info("Keystone answers again: repeating the un-reserve", append(dev.logAttrs(), "waited", c.now().Sub(start).Round(time.Second).String())...)
			return nil
		}
		wait = min(2*wait, keystoneProbeMax)
	}
}
