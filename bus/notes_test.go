package bus

import (
	"strings"
	"testing"
)

// A <topic>.info routing key bound without its <topic>.error is valid but
// misses a failed build's create.error (priority ERROR): Notes says so,
// naming the key to add; the defaults need no note.
func TestNotesNameAnInfoKeyWithoutItsErrorKey(t *testing.T) {
	t.Parallel()
	var c Config
	c.SetDefaults()
	if n := c.Notes(); len(n) != 0 {
		t.Errorf("defaults: notes %q, want none", n)
	}
	c.Nova.RoutingKeys = []string{"versioned_notifications.info", "notifications.info", "notifications.error", "custom.warn"}
	n := c.Notes()
	if len(n) != 1 || !strings.Contains(n[0], "binds versioned_notifications.info but not versioned_notifications.error") ||
		!strings.Contains(n[0], "add versioned_notifications.error") {
		t.Errorf("notes %q, want one naming versioned_notifications.error", n)
	}
}
