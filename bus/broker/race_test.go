//go:build race

package broker

// raceEnabled: the tests run under the race detector (make race-short).
const raceEnabled = true
