package pipeline

import (
	"fmt"

	"github.com/scour-project/scour/plugins"
)

// judge turns what a step that answered ok reported under
// details.verification into its outcome (plugins.JudgeVerification), the
// same for built-ins and plugins: a failed, missing (on a step that
// verifies) or unknown verification fails the step permanently, whatever
// its status said, keeping its details, stderr and file hash for the
// record; a verification that could not verify (not-applicable) returns
// why, and the step is recorded skipped: it proved nothing.
func (r *run) judge(s *Step, res *plugins.Result) (notApplicable string, err error) {
	j, why := plugins.JudgeVerification(res.Details, s.verifies())
	switch j {
	case plugins.NotVerifiable:
		return why, nil
	case plugins.Refused:
		details := make(map[string]any, len(res.Details)+1)
		for k, v := range res.Details {
			details[k] = v
		}
		if _, present := plugins.VerificationResult(details); !present {
			// None, or not an object: the record lists the step under
			// verification, saying so (and what it said instead).
			reason := "the step " + why
			if said, ok := details[plugins.VerificationKey]; ok {
				reason += fmt.Sprintf(" (it said %v)", said)
			}
			details[plugins.VerificationKey] = plugins.Verification{Method: "none reported",
				Result: plugins.VerifyNotReported, Reason: reason}.Map()
		}
		r.log.Error("step answered ok but its verification does not pass: failing it", "step", s.Name, "reason", why)
		return "", &plugins.Error{Code: plugins.CodePermanent, Details: details, Stderr: res.Stderr, SHA256: res.SHA256,
			Msg: fmt.Sprintf("device %s: step %s answered ok, but %s: the media may still hold the previous tenant's data, so the device stays reserved (quarantined); "+
				"read the step's details and stderr in the run's record (scourctl records show), fix the cause, then release it with scourctl placement unquarantine (it is cleaned again before it returns)",
				r.t.Address, s.Name, why)}
	}
	return "", nil
}

// verificationRefused reports whether a step's recorded verification
// (if it reported one) is anything but passed or not-applicable, or
// whether a step that verifies failed in any way (a read error, a
// timeout: it checked nothing): such a step ends the run even when it is
// optional, since nothing shows the tenant's data is gone.
func verificationRefused(rec StepRecord, verifies bool) bool {
	if verifies && rec.State == StepFailed {
		return true
	}
	result, present := plugins.VerificationResult(rec.Details)
	return present && result != plugins.VerifyPassed && result != plugins.VerifyNotApplicable
}

// unverified is the last check before a clean verdict, whatever path led
// there (a plugin or a built-in, a step run now or resumed from a record
// an older scour stored): every step that verifies and succeeded must
// have reported a passed verification, none that verifies may have
// failed, and no step may have recorded a verification that is not
// passed or not-applicable. It returns the
// offending step and why, or "" when the run may be clean.
func (r *run) unverified() (step, why string) {
	steps := r.prof.Pipeline.Steps
	for _, rec := range r.recs {
		if rec.State == StepSkipped {
			continue // did not run, or could not verify: proves nothing either way
		}
		result, present := plugins.VerificationResult(rec.Details)
		verifies := rec.Index < len(steps) && steps[rec.Index].verifies()
		switch {
		case verifies && rec.State == StepFailed:
			why = "failed: " + rec.Message
		case verificationRefused(rec, verifies):
			why = fmt.Sprintf("recorded verification %q", result)
		case verifies && rec.State == StepSucceeded && !present:
			why = "no verification recorded"
		case verifies && rec.State == StepSucceeded && result != plugins.VerifyPassed:
			why = fmt.Sprintf("recorded verification %q, not %s", result, plugins.VerifyPassed)
		default:
			continue
		}
		return rec.Name, fmt.Sprintf("refusing a clean verdict: step %s (%s) %s: the media may still hold the previous tenant's data; device %s stays reserved (quarantined): clean it again and release it with scourctl placement unquarantine",
			rec.Name, rec.State, why, r.t.Address)
	}
	return "", ""
}

// verificationFinding reports whether a step's answer (an error's
// details, or a record's) holds a verification that found the previous
// tenant's data or cannot rule it out, and what it says: a failed one
// naming a mismatch, a failed one naming neither a mismatch nor a reason,
// no result, or a result scour does not know (the engine's "not reported"
// for a verifying step that reported none included). Such a finding is
// permanent: a step's retry, or a later run, would only draw new samples
// or ask the plugin again until an answer passes (see attempts and
// verdictFor). A failed verification that gives only a reason, no
// mismatch, says why nothing could be compared (the built-in verify's
// pre-erase samples lost across a restart): like a read error or a
// timeout it checked nothing, and its code decides. Passed,
// not-applicable, or no verification object: no finding.
func verificationFinding(details map[string]any) (why string, found bool) {
	m, ok := details[plugins.VerificationKey].(map[string]any)
	if !ok {
		return "", false
	}
	result, _ := m["result"].(string)
	mismatch, _ := m["mismatch"].(string)
	reason, _ := m["reason"].(string)
	switch result {
	case plugins.VerifyPassed, plugins.VerifyNotApplicable:
		return "", false
	case plugins.VerifyFailed:
		switch {
		case mismatch != "":
			return "its verification failed: " + mismatch, true
		case reason != "":
			return "", false
		}
		return "its verification failed (no mismatch or reason given)", true
	case "":
		return "its verification has no result", true
	}
	return fmt.Sprintf("its verification result is %q, not %s", result, plugins.VerifyPassed), true
}

// tenantDataFound turns a failed attempt whose verification found the
// previous tenant's data (verificationFinding: why) into the step's
// permanent failure, never retried whatever retry.attempts and
// retry.retryable_codes say: code 12, or the step's own 13 (retire),
// which quarantines too. Its details, stderr and file hash stay.
func (r *run) tenantDataFound(s *Step, err error, why string) error {
	pe := *plugins.AsError(err)
	said := ""
	if pe.Code != plugins.CodeRetire {
		if pe.Code != plugins.CodePermanent {
			said = fmt.Sprintf(" (it answered code %d)", pe.Code)
		}
		pe.Code = plugins.CodePermanent
	}
	r.log.Error("step's verification found the previous tenant's data: failing it permanently, no retry", "step", s.Name, "reason", why, "code", pe.Code)
	pe.Msg = fmt.Sprintf("device %s: step %s: %s%s: %s; a verification that found the previous tenant's data is never retried (retry.attempts and retry.retryable_codes do not apply), so the device stays reserved (quarantined): "+
		"read the step's details and stderr in the run's record (scourctl records show), fix the erase, then release it with scourctl placement unquarantine (it is cleaned again before it returns)",
		r.t.Address, s.Name, why, said, pe.Msg)
	return &pe
}
