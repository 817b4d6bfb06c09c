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

// Placement's database is rebuilt under a running scourd (restored from
// an empty backup, nova-compute then reporting its providers again): the
// quarantine trait scourd created at start is gone with it. scourd
// creates it again and goes on (scans filter on it, un-reserves check it),
// instead of failing every scan with HTTP 400 until it is restarted: a
// device released after the rebuild is cleaned and returned.
func TestPlacementDatabaseRebuilt(t *testing.T) {
	t.Parallel()
	const addr = "0000:81:00.0"
	c := &Cloud{Bus: harness.StartRabbitMQ(t).VHost(t), P: harness.StartPlacement(t, harness.Dedicated())}
	h := c.AddHost(t, []SimDevice{{Address: addr}})
	Eventually(t, 30*time.Second, "scourd connected to Placement", func() (bool, string) {
		return strings.Contains(h.Logs(), "placement connected"), "no 'placement connected' in the log yet" // the trait is created before
	})

	c.P.RebuildDatabase(t)
	h.Node = c.P.SeedComputeNode(t, h.Name, seedDevices(h.Devices)...)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, addr)
	c.Delete(t, h, inst, harness.Versioned)
	c.WaitAvailable(t, h, addr, 60*time.Second)
	if !h.MediaZeroed(t, addr) {
		t.Error("device returned without being wiped")
	}
	if !strings.Contains(h.Logs(), "created it again") {
		t.Errorf("no log line saying the quarantine trait was created again:\n%s", tail(h.Logs(), 30))
	}
}
