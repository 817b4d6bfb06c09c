package pipeline

import (
	"errors"
	"unicode/utf8"

	"github.com/scour-project/scour/plugins"
)

// TriesKey is the details key under which the engine records, for a step
// that started an attempt, how its attempts within the run went:
// {"count": attempts, "earlier_errors": [...], "earlier_errors_omitted": n}.
// earlier_errors are the errors ("message (code N)") of the failed attempts before the last
// one (whose outcome is the step's own), the newest maxEarlierErrors,
// each cut to maxErrorBytes; earlier_errors_omitted counts older ones not
// kept. A sanitize that timed out once and then succeeded is recorded as
// two tries and the timeout, not as one clean attempt.
const TriesKey = "scour_tries"

const (
	maxEarlierErrors = 3
	maxErrorBytes    = 512
)

// tries is what a step's attempts leave for its record besides
// StepRecord.Attempts.
type tries struct {
	// sha256 is the plugin file's SHA-256 as the runner read it just
	// before starting it, the last time it did.
	sha256  string
	earlier []string
	omitted int
}

// ran keeps what one attempt's outcome says about the tool that ran.
func (t *tries) ran(res *plugins.Result, err error) {
	var pe *plugins.Error
	switch {
	case res != nil && res.SHA256 != "":
		t.sha256 = res.SHA256
	case errors.As(err, &pe) && pe.SHA256 != "":
		t.sha256 = pe.SHA256
	}
}

// failed keeps the error of an attempt that is retried.
func (t *tries) failed(err error) {
	msg := plugins.AsError(err).Error() // "message (code N)"
	if len(msg) > maxErrorBytes {
		n := maxErrorBytes
		for n > 0 && !utf8.RuneStart(msg[n]) { // never half a character
			n--
		}
		msg = msg[:n] + " [truncated]"
	}
	t.earlier = append(t.earlier, msg)
	if len(t.earlier) > maxEarlierErrors {
		t.earlier = t.earlier[1:]
		t.omitted++
	}
}

// details is the TriesKey detail of a step that made n attempts.
func (t *tries) details(n int) map[string]any {
	d := map[string]any{"count": n}
	if len(t.earlier) > 0 {
		d["earlier_errors"] = append([]string(nil), t.earlier...)
	}
	if t.omitted > 0 {
		d["earlier_errors_omitted"] = t.omitted
	}
	return d
}
