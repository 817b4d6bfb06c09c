package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// A host loses its claims database mid-life (disk replaced, file
// deleted) while an instance holds one of its devices. scourd restarted
// on an empty store rebuilds the instance's claim from Placement (its
// allocation, project and user), so the delete that follows cleans the
// device at once and the record names the instance and its project, not
// "unknown".
func TestClaimsRebuiltAfterDatabaseLoss(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: addr}, {Address: "0000:82:00.0"}}, WithReconcileInterval(time.Hour))
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	Eventually(t, 30*time.Second, "claim recorded", func() (bool, string) {
		return strings.Contains(h.Logs(), "claim recorded"), "no 'claim recorded' in the log yet"
	})

	// The first life may have rebuilt the claim too (its start scan can
	// see the allocation before the create.end is handled): only a
	// rebuild after the restart counts.
	rebuilt := strings.Count(h.Logs(), "claim rebuilt from Placement")
	h.Stop(t)
	db, err := filepath.Glob(filepath.Join(h.Dir, "state", "claims.sqlite*"))
	if err != nil || len(db) == 0 {
		t.Fatalf("claims database files under %s: %v %v", h.Dir, db, err)
	}
	for _, f := range db {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	h.Start(t)
	Eventually(t, 30*time.Second, "claim rebuilt from Placement", func() (bool, string) {
		return strings.Count(h.Logs(), "claim rebuilt from Placement") > rebuilt, "no 'claim rebuilt from Placement' in the log since the restart"
	})

	c.Delete(t, h, inst, harness.Versioned)
	cleanedFor(t, c, h, addr, inst)
	recs := h.Records(t, addr)
	if got := nested(recs[0], "previous_tenant", "project_id"); got != "tenant-a" {
		t.Errorf("record names previous project %q, want tenant-a (from Placement's allocation)", got)
	}
}
