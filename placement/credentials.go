package placement

import (
	"errors"
	"fmt"
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
	now := c.now()
	until := now.Add(credentialsCooldown)
	c.creds.mu.Lock()
	started := !now.Before(c.creds.until)
	if until.After(c.creds.until) {
		c.creds.until = until
	}
	c.creds.mu.Unlock()
	if started {
		c.log.Error("Keystone refused scour's credentials: Placement calls fail at once until the cooldown ends, then one is tried again",
			"until", until.Format(time.RFC3339), "err", err)
	}
	if c.credFields != "" {
		err = fmt.Errorf("%w; check %s", err, c.credFields)
	}
	return fmt.Errorf("%w; %s", err, notRetried(until))
}

func notRetried(until time.Time) string {
	return fmt.Sprintf("not retried with Keystone until %s: fix the credentials in scourd's environment or clouds.yaml and restart scourd, or unlock the user in Keystone if it was locked out",
		until.Format(time.RFC3339))
}
