package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/sethvargo/go-retry"
)

// errConflict marks a 409 generation conflict: re-read and retry.
var errConflict = errors.New("resource provider generation conflict")

// errChanged marks a device whose generation moved between two reads that
// both succeeded (Nova allocated or freed it, scour published its
// capability traits, ...): it is read again so its state comes from one
// generation. Nothing failed; it is counted apart from conflicts and
// logged at debug level.
var errChanged = errors.New("resource provider changed between two reads")

// lostRace is the detail of the 500 placement (8.0.0) answers when a write
// lost a generation race its handler does not turn into a 409: PUT
// /resource_providers/{uuid}/traits checks the generation first, but a
// request that passed the same check at the same moment in another worker
// makes its write fail with ResourceProviderConcurrentUpdateDetected,
// uncaught. Nothing was written: it is a conflict like any other (seen
// only against a Placement with several workers: docs/e2e.md).
const lostRace = "Another thread concurrently updated the resource provider data"

// do issues one request. path is relative to the Placement endpoint and
// may carry a query. Every call is counted. Bodies are marshalled by
// gophercloud into a bytes.Reader, so requests carry Content-Length
// (uwsgi rejects chunked bodies). After Keystone refused scour's
// credentials nothing is sent for a while (credentials.go).
func (c *Client) do(ctx context.Context, method, path string, body, out any, ok ...int) error {
	if err := c.credentialsHeld(method, path); err != nil {
		return err
	}
	if method != http.MethodGet {
		release, err := c.writeSlot(ctx)
		if err != nil {
			return &RecoverableError{Err: fmt.Errorf("placement %s /%s: waiting for one of the %d write slots (placement.max_parallel_writes): %w", method, path, cap(c.writes), err)}
		}
		defer release()
	}
	c.calls.Add(1)
	countCall(ctx)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	ro := &gophercloud.RequestOpts{JSONBody: body, JSONResponse: out, OkCodes: ok}
	_, err := c.sc.Request(ctx, method, c.sc.Endpoint+path, ro) // gophercloud closes the body
	err = c.credentialsRefused(classify(method, path, err))
	c.metrics.requests.WithLabelValues(method, outcome(err)).Inc()
	if method != http.MethodGet {
		c.noteWriteAnswer(method, path, err)
	}
	return err
}

// serialWritesFor is how long the writes of a Placement that answered a
// write with 500 or 503 go one at a time: a Placement on sqlite (its
// "database is locked"), or with a busy database, fails concurrent
// writers; parallel writes from this host would only cost it more
// failures and retries.
const serialWritesFor = 10 * time.Minute

// noteWriteAnswer starts (or extends) a one-at-a-time period after a
// write answered 500 or 503 while this client allows several writes. A
// 500 "database is locked" says Placement runs on sqlite, which fails
// every pair of concurrent writers and will not stop doing so: the period
// then lasts until scourd restarts, so a host pays for its parallelism
// once per start, not once every serialWritesFor.
func (c *Client) noteWriteAnswer(method, path string, err error) {
	var api *APIError
	if cap(c.writes) < 2 || !errors.As(err, &api) ||
		(api.Status != http.StatusInternalServerError && api.Status != http.StatusServiceUnavailable) {
		return
	}
	now := c.now().UnixNano()
	until := now + int64(serialWritesFor)
	sqlite := api.Status == http.StatusInternalServerError && strings.Contains(api.Detail, sqliteLocked)
	if sqlite {
		until = math.MaxInt64
	}
	old := c.serialUntil.Load()
	for old < until && !c.serialUntil.CompareAndSwap(old, until) {
		old = c.serialUntil.Load()
	}
	switch {
	case sqlite && old != math.MaxInt64:
		c.log.Warn("Placement answered a write with 500 \"database is locked\": it runs on sqlite, which fails concurrent writers; this host writes to it one at a time until scourd restarts (set placement.max_parallel_writes: 1 to spare Placement even the first failure)",
			"method", method, "path", "/"+path, "status", api.Status, "max_parallel_writes", cap(c.writes))
	case !sqlite && old < now:
		c.log.Warn("Placement answered a write with a server error while this host allows several writes at once; writing one at a time for a while (a Placement with a busy database fails concurrent writers; placement.max_parallel_writes: 1 makes it permanent; a Placement restarting gives the same answer)",
			"method", method, "path", "/"+path, "status", api.Status, "for", serialWritesFor, "max_parallel_writes", cap(c.writes))
	}
}

// writeConcurrency is the writes this client allows in flight now
// (scour_placement_write_concurrency, read when scraped): 1 during a
// one-at-a-time period, else placement.max_parallel_writes.
func (c *Client) writeConcurrency() float64 {
	if c.serialUntil.Load() > c.now().UnixNano() {
		return 1
	}
	return float64(cap(c.writes))
}

// sqliteLocked is in Placement's 500 answer to a write that met another
// on a sqlite database (sqlite3.OperationalError).
const sqliteLocked = "database is locked"

// writeSlot waits for one of the client's MaxParallelWrites write slots
// and returns its release. Placement serializes writes in its database
// anyway: more of them at once from one host only make it answer 500
// (sqlite's "database is locked", a busy database), and each retry is
// one more write. A write waits here, not in a retry's backoff, and holds
// its slot only while its request is in flight. The wait is observed in
// scour_placement_write_wait_seconds.
//
// After Placement answered a write with 500 or 503, writes go one at a
// time for serialWritesFor (noteWriteAnswer): each also takes the serial
// token.
func (c *Client) writeSlot(ctx context.Context) (func(), error) {
	start := time.Now()
	select {
	case c.writes <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release := func() { <-c.writes }
	if c.serialUntil.Load() > c.now().UnixNano() {
		select {
		case c.serial <- struct{}{}:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
		release = func() { <-c.serial; <-c.writes }
	}
	c.metrics.writeWait.Observe(time.Since(start).Seconds())
	return release, nil
}

func outcome(err error) string {
	var api *APIError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, errConflict):
		return "conflict"
	case errors.As(err, &api):
		return strconv.Itoa(api.Status)
	default:
		return "error"
	}
}

// classify turns gophercloud/net errors into this package's error kinds.
// Anything that is not a definite answer from Placement (network failure,
// timeout, unparseable body, 5xx) is recoverable. A refusal of scour's
// credentials (401, or Keystone's 4xx when re-authenticating) or of its
// role (403) is recoverable too, as ErrCredentials / ErrForbidden, which
// retry does not repeat.
func classify(method, path string, err error) error {
	if err == nil {
		return nil
	}
	// gophercloud's re-authentication error does not unwrap: look inside.
	var reauth *gophercloud.ErrUnableToReauthenticate
	if errors.As(err, &reauth) {
		if errors.Is(reauth.ErrReauth, ErrCredentials) { // the login was held back (heldTransport)
			return &RecoverableError{Err: fmt.Errorf("placement %s /%s: %w", method, path, reauth.ErrReauth)}
		}
		if kc, ok := responseCode(reauth.ErrReauth); ok && kc.Actual >= 400 && kc.Actual < 500 && kc.Actual != http.StatusTooManyRequests {
			return &RecoverableError{Err: fmt.Errorf("placement %s /%s: %w%w (Keystone answered HTTP %d to re-authentication)", method, path, ErrCredentials, errLoginRefused, kc.Actual)}
		}
		return &RecoverableError{Err: fmt.Errorf("placement %s /%s: %w", method, path, err)} // Keystone unreachable or failing: transient
	}
	code, ok := responseCode(err)
	if !ok {
		return &RecoverableError{Err: fmt.Errorf("placement %s /%s: %w", method, path, err)}
	}
	api := &APIError{Status: code.Actual, Method: method, URL: "/" + path}
	var body struct {
		Errors []struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		} `json:"errors"`
	}
	if json.Unmarshal(code.Body, &body) == nil && len(body.Errors) > 0 {
		api.Code = body.Errors[0].Code
		api.Detail = strings.Join(strings.Fields(body.Errors[0].Detail), " ")
	} else {
		api.Detail = strings.TrimSpace(string(code.Body))
		if len(api.Detail) > 200 {
			api.Detail = api.Detail[:200] + "..."
		}
	}
	switch {
	case code.Actual == http.StatusConflict && (api.Code == "" || api.Code == "placement.concurrent_update"),
		code.Actual == http.StatusInternalServerError && strings.Contains(api.Detail, lostRace):
		return fmt.Errorf("%w: %w", errConflict, api)
	case code.Actual == http.StatusBadRequest && strings.Contains(api.Detail, "No such trait"):
		return fmt.Errorf("%w: %w", errNoSuchTrait, api)
	case code.Actual == http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, api)
	case code.Actual == http.StatusNotAcceptable:
		return fmt.Errorf("%w: %w (Placement no longer serves the microversion negotiated at start; restart scour)", ErrMicroversion, api)
	case code.Actual == http.StatusUnauthorized:
		return &RecoverableError{Err: fmt.Errorf("%w: %w", api, ErrCredentials)}
	case code.Actual == http.StatusForbidden:
		return &RecoverableError{Err: fmt.Errorf("%w: %w", api, ErrForbidden)}
	case code.Actual >= 500, code.Actual == http.StatusTooManyRequests:
		return &RecoverableError{Err: api}
	}
	return api
}

func responseCode(err error) (gophercloud.ErrUnexpectedResponseCode, bool) {
	var v gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &v) {
		return v, true
	}
	var p *gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &p) && p != nil {
		return *p, true
	}
	return v, false
}

// retry runs f until it succeeds, returns a permanent error, or the retry
// budget (Config.Retry) is spent. Conflicts, changes between reads and
// recoverable errors are retried, except a refusal of scour's credentials
// or role (ErrCredentials, ErrForbidden), returned at once: repeating it
// only adds failed logins; a conflict or change that outlasts the budget
// becomes recoverable. A series that retried logs one line at its end
// (reportRetries), with about (slog key-value pairs naming the device,
// when there is one), and counts every retry in
// scour_placement_retries_total.
func (c *Client) retry(ctx context.Context, f func(context.Context) error, about ...any) error {
	r := c.cfg.Retry
	b := retry.NewExponential(r.Base)
	b = retry.WithJitterPercent(25, b)
	b = retry.WithCappedDuration(r.Max, b)
	b = retry.WithMaxRetries(uint64(r.Attempts-1), b)
	b = retry.WithMaxDuration(r.Budget, b)
	tries := 0
	var retried retries
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		tries++
		err := f(ctx)
		if errors.Is(err, ErrCredentials) || errors.Is(err, ErrForbidden) {
			return err
		}
		if errors.Is(err, errConflict) || errors.Is(err, errChanged) || IsRecoverable(err) {
			retried.add(err)
			return retry.RetryableError(err)
		}
		return err
	})
	outcome := "succeeded"
	if err != nil {
		outcome = "gave up"
	}
	c.reportRetries(retried, outcome, about...)
	if errors.Is(err, errConflict) || errors.Is(err, errChanged) {
		return &RecoverableError{Err: fmt.Errorf("gave up after %d tries: %w", tries, err)}
	}
	// Cancelled or out of time while waiting: try again later.
	if (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && !IsRecoverable(err) {
		return &RecoverableError{Err: err}
	}
	return err
}

// retries counts the attempts of one series that failed with a retryable
// error (the last one too when the series gave up: its caller retries
// later), and the reads repeated because the device changed meanwhile.
type retries struct {
	conflicts, changed, errors int
	last                       error
}

func (r *retries) add(err error) {
	switch {
	case errors.Is(err, errChanged):
		r.changed++
	case errors.Is(err, errConflict):
		r.conflicts++
	default:
		r.errors++
	}
	r.last = err
}

// reportRetries counts a series' retries and logs them once. Reads
// repeated only because the device changed between them are routine (a
// device in use changes): debug level, unless they outlasted the budget.
// A failed attempt (409, 5xx, network) is a WARN naming the device.
func (c *Client) reportRetries(r retries, outcome string, about ...any) {
	if r.conflicts+r.changed+r.errors == 0 {
		return
	}
	c.metrics.retries.WithLabelValues("conflict").Add(float64(r.conflicts))
	c.metrics.retries.WithLabelValues("changed").Add(float64(r.changed))
	c.metrics.retries.WithLabelValues("error").Add(float64(r.errors))
	if r.conflicts+r.errors == 0 {
		attrs := append([]any{"reads_repeated", r.changed, "outcome", outcome}, about...)
		if outcome == "gave up" {
			c.log.Warn("device kept changing while being read; scour reads it again later", attrs...)
			return
		}
		c.log.Debug("device changed while being read; read again", attrs...)
		return
	}
	attrs := append([]any{"failed_attempts", r.conflicts + r.errors, "conflicts", r.conflicts, "errors", r.errors,
		"reads_repeated", r.changed, "outcome", outcome, "last_error", r.last}, about...)
	c.log.Warn("Placement request failed and was retried (Placement overloaded or restarting? check its logs and scour_placement_requests_total)", attrs...)
}
