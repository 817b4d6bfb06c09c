package hardware

import (
	"strings"
	"testing"
)

// NewFixtureBackend is the real backend over a copy of the fake sysfs with
// a runner answering from the recorded tool outputs (sanitize completes,
// format succeeds), for the conformance suite in hardware_test.
func NewFixtureBackend(t *testing.T) *Real {
	r := fixtureRunner(t, func(cmd string) ([]byte, error, bool) {
		switch {
		case strings.HasPrefix(cmd, "nvme sanitize /dev/"), strings.HasPrefix(cmd, "nvme format "):
			return nil, nil, true
		case strings.HasPrefix(cmd, "nvme sanitize-log "):
			return fixture(t, "sanitize-log-done.json"), nil, true
		}
		return nil, nil, false
	})
	return newTestReal(t, Config{}, r)
}
