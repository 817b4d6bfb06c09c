package placement

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// credentialsCooldown is how long the client sends nothing after Keystone
// refused scour's credentials. Each call (every scan, release, device
// check and bus retry of a command makes its own) would otherwise try
// Keystone's password login once more, and Keystone's
// lockout_failure_attempts counts every one: a rotated password would lock
// scour's service user out for the whole fleet. A minute keeps a host at
// about one attempt a minute, and a fixed Keystone (user unlocked,
// password set back) is used again within a minute without a restart.
const credentialsCooldown = time.Minute

// errLoginRefused marks an ErrCredentials that is Keystone refusing a
// login (a failed attempt its lockout counts), not Placement answering 401
// to a token Keystone just issued (a token or fernet key skew: no failed
// login, and a minute without Placement would only delay cleaning). Its
// text is empty: it only tags the error.
var errLoginRefused = errors.New("")

// credsHold remembers until when Keystone is not asked again.
type credsHold struct {
	mu    sync.Mutex
	until time.Time
}

// credentialsHeld fails a request at once, without contacting Keystone or
// Placement, while the cooldown of an earlier refusal lasts.
func (c *Client) credentialsHeld(method, path string) error {
	c.creds.mu.Lock()
	until := c.creds.until
	c.creds.mu.Unlock()
	if !c.now().Before(until) {
		return nil
	}
	c.metrics.skipped.Inc()
	return &RecoverableError{Err: fmt.Errorf("placement %s /%s: %w; %s", method, path, ErrCredentials, notRetried(until))}
}

// credentialsRefused starts (or extends) the cooldown after err, a
// refusal of scour's credentials, and says so in the error. The first
// refusal of a cooldown is logged at ERROR; the calls failed during it are
// counted in scour_placement_requests_skipped_total, not logged. Only for
// a refused Keystone login (errLoginRefused): a static token, or Placement
// refusing a token Keystone issued, is no failed login attempt.
func (c *Client) credentialsRefused(err error) error {
	if !errors.Is(err, errLoginRefused) || c.cfg.Token != "" {
		return err
	}
	until := c.holdCredentials(err)
	if c.credFields != "" {
		err = fmt.Errorf("%w; check %s", err, c.credFields)
	}
	return fmt.Errorf("%w; %s", err, notRetried(until))
}

// holdCredentials starts (or extends) the cooldown after Keystone refused
// a login (why), for every service on the session, and logs its start.
func (c *Client) holdCredentials(why any) time.Time {
	now := c.now()
	until := now.Add(credentialsCooldown)
	c.creds.mu.Lock()
	started := !now.Before(c.creds.until)
	if until.After(c.creds.until) {
		c.creds.until = until
	}
	c.creds.mu.Unlock()
	if started {
		c.log.Error("Keystone refused scour's credentials: Placement, Glance and Cyborg calls fail at once until the cooldown ends, then one is tried again",
			"until", until.Format(time.RFC3339), "err", why)
	}
	return until
}

// heldTransport carries every request of the Keystone session that
// Placement shares with Glance and Cyborg (ServiceClient), so that those
// services honour the cooldown too: while it lasts a request fails at
// once with ErrCredentials (recoverable: a device waits, it is never
// quarantined for it), so no service's 401 leads to a password login that
// Keystone's lockout would count; and Keystone refusing a login, whichever
// service's call re-authenticated, starts it. Placement's own calls stop
// earlier, in do.
type heldTransport struct {
	next http.RoundTripper
	c    *Client
}

// Unwrap is the transport it wraps: the images package reads the TLS
// settings Glance is reached with through it (certificate verification
// off refuses Glance images).
func (t *heldTransport) Unwrap() http.RoundTripper { return t.next }

func (t *heldTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c := t.c
	c.creds.mu.Lock()
	until := c.creds.until
	c.creds.mu.Unlock()
	if c.now().Before(until) {
		if r.Body != nil {
			r.Body.Close() // a RoundTripper closes the body, even on error
		}
		err := fmt.Errorf("%s %s: %w", r.Method, r.URL.Redacted(), ErrCredentials)
		if c.credFields != "" {
			err = fmt.Errorf("%w; check %s", err, c.credFields)
		}
		return nil, &RecoverableError{Err: fmt.Errorf("%w; %s", err, notRetried(until))}
	}
	resp, err := t.next.RoundTrip(r)
	// New's first login (c.sc not set yet) reports its own refusal.
	if err == nil && c.sc != nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/auth/tokens") &&
		resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
		c.holdCredentials(fmt.Sprintf("Keystone answered HTTP %d to the login at %s", resp.StatusCode, r.URL.Redacted()))
	}
	return resp, err
}

func notRetried(until time.Time) string {
	return fmt.Sprintf("not retried with Keystone until %s: fix the credentials in scourd's environment or clouds.yaml and restart scourd, or unlock the user in Keystone if it was locked out",
		until.Format(time.RFC3339))
}
