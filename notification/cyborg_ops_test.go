package notification

import (
	"os"
	"path/filepath"
	"testing"
)

// Nova keeps an instance's accelerators (its Cyborg ARQs and their
// allocations) on pause, suspend, lock and reboot (the Cyborg-Nova-Glance
// spec's operation table): scour must do nothing for them. Each of Nova's
// own samples decodes and routes to no command at all.
func TestOperationsThatKeepAcceleratorsRouteNothing(t *testing.T) {
	dir := filepath.Join("testdata", "versioned") // Nova's doc/notification_samples
	for _, name := range []string{
		"instance-pause-start.json", "instance-pause-end.json",
		"instance-unpause-start.json", "instance-unpause-end.json",
		"instance-suspend-start.json", "instance-suspend-end.json",
		"instance-lock.json", "instance-lock-with-reason.json", "instance-unlock.json",
		"instance-reboot-start.json", "instance-reboot-end.json",
	} {
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatalf("Nova's sample: %v", err)
			}
			ev, err := Decode(body)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			c, err := Dispatch(ev)
			if err != nil || c != nil {
				t.Fatalf("Dispatch(%s) = %+v, %v; want no command", ev.EventType, c, err)
			}
		})
	}
}
