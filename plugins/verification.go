package plugins

import "fmt"

// Result.Details keys an erasing step sets beside TechniqueKey (which is
// worded for people and records), so the steps after it, and dry runs,
// know what the erase left behind.
const (
	// EraseKey is the erase technique that actually ran, as a stable id:
	// "sanitize-crypto", "sanitize-block", "sanitize-overwrite",
	// "format-ses2", "format-ses1", "overwrite".
	EraseKey = "erase"
	// ExpectKey says what a read-back of the media should find after that
	// technique: "0x00".."0xff", or ExpectNone.
	ExpectKey = "expect"
	// SampledKey is how many blocks a step sampled just before a crypto
	// erase (the blocks themselves are in its pre_erase_samples, which
	// the claims store may drop for size). It is small and always kept:
	// a verify resumed from the stored record tells "nothing could be
	// sampled" (0) from "samples were taken and lost", which must fail.
	SampledKey = "pre_erase_sampled"
	// SampleErrorKey says why some media could not be sampled before a
	// crypto erase (a namespace that could not be read, media that could
	// not be listed). Small (bounded) and always kept: the verify after
	// the erase must fail, never be skipped as "nothing could be
	// sampled" nor pass on the namespaces that could be.
	SampleErrorKey = "pre_erase_sample_error"
)

// ExpectNone: no read-back pattern can be expected after the technique
// (a crypto erase leaves noise).
const ExpectNone = "none"

// Verification results.
const (
	VerifyPassed        = "passed"
	VerifyFailed        = "failed"
	VerifyNotApplicable = "not-applicable"
)

// VerifyNotReported is the result the engine records for a step that
// verifies but reported no verification (the record's "not reported").
const VerifyNotReported = "not reported"

// VerificationResult reads the result a step reported under
// VerificationKey: present says whether details has a verification, an
// object (a value of another type, such as a sentence, is a description,
// not a verification); result is "" when it has no string result.
func VerificationResult(details map[string]any) (result string, present bool) {
	m, present := details[VerificationKey].(map[string]any)
	if !present {
		return "", false
	}
	result, _ = m["result"].(string)
	return result, true
}

// Judgement is what a step's verification makes of a step that answered
// ok.
type Judgement int

const (
	// Verified: the step may count as succeeded (its verification
	// passed, or it neither verifies nor reported a verification).
	Verified Judgement = iota
	// NotVerifiable: the verification could not verify anything
	// (not-applicable); the step proved nothing and is recorded skipped.
	NotVerifiable
	// Refused: the verification failed, is missing from a step that
	// verifies, or is not one scour knows; the step failed permanently,
	// whatever its status said.
	Refused
)

// JudgeVerification decides what a step that answered ok (status "ok",
// exit 0; a built-in's nil error) really achieved, from what it reported
// under VerificationKey. verifies says the step is configured as a
// verifying step (type verify, or a plugin with verifies: true): it must
// report a verification. why says what was wrong (Refused) or why nothing
// could be verified (NotVerifiable).
//
// A verification is part of a step's outcome: a plugin answering
// {"status":"ok"} with a failed verification has found the tenant's data
// on the media, and its status does not outweigh that.
func JudgeVerification(details map[string]any, verifies bool) (j Judgement, why string) {
	raw, said := details[VerificationKey]
	m, isObject := raw.(map[string]any)
	switch {
	case !isObject && !verifies:
		// None, or not a verification in this protocol's sense: a step
		// that does not verify describing its own check in words (the
		// GPU scrub tool's "verification": "every covered byte read
		// back ..."). Its own status decides, as for any other detail.
		return Verified, ""
	case !said:
		return Refused, "it verifies (verifies: true, or type verify) yet reported no details." + VerificationKey + ": nothing says the media were checked"
	case !isObject:
		return Refused, "its details." + VerificationKey + " is not an object"
	}
	result, _ := m["result"].(string)
	switch result {
	case VerifyPassed:
		return Verified, ""
	case VerifyNotApplicable:
		reason, _ := m["reason"].(string)
		if reason == "" {
			reason = "no reason given"
		}
		if !verifies {
			return Verified, ""
		}
		return NotVerifiable, reason
	case VerifyFailed:
		why = "its verification failed"
		if mm, _ := m["mismatch"].(string); mm != "" {
			why += ": " + mm
		}
		return Refused, why
	case "":
		return Refused, "its details." + VerificationKey + " has no result"
	default:
		return Refused, fmt.Sprintf("its verification result %q is none of %s, %s, %s", result, VerifyPassed, VerifyFailed, VerifyNotApplicable)
	}
}
