package plugins

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
