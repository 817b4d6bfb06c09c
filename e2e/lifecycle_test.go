package e2e

import (
	"testing"
	"time"

	"github.com/scour-project/scour/e2e/harness"
)

// Boot -> delete -> the device is wiped (media really zeroed), a record is
// stored, and reserved goes back to 0; in both notification formats.
func TestBootDeleteCleansAndReturns(t *testing.T) {
	for _, f := range []harness.Format{harness.Versioned, harness.Legacy} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			c := NewCloud(t)
			// A long interval: only the notifications drive this scenario.
			h := c.AddHost(t, []SimDevice{{Address: "0000:81:00.0"}, {Address: "0000:82:00.0"}}, WithReconcileInterval(time.Hour))
			inst := harness.NewUUID()
			c.Boot(t, h, inst, f, "0000:81:00.0")
			if h.MediaZeroed(t, "0000:81:00.0") {
				t.Fatal("the simulated media starts zeroed: the wipe could not be told from nothing")
			}
			c.Delete(t, h, inst, f)
			c.WaitAvailable(t, h, "0000:81:00.0", 60*time.Second)
			if !h.MediaZeroed(t, "0000:81:00.0") {
				t.Error("device returned to the pool but its media was not wiped")
			}
			recs := h.Records(t, "0000:81:00.0")
			if len(recs) != 1 {
				t.Fatalf("want 1 cleaning record, got %d: %v", len(recs), recs)
			}
			// The record names the device as discovery knows it.
			if dev, _ := recs[0]["device"].(map[string]any); dev["serial"] != "S000081000" || dev["pci_address"] != "0000:81:00.0" {
				t.Errorf("record device = %v, want the simulated drive's serial S000081000 at 0000:81:00.0", dev)
			}
			if c.Reserved(t, h.Device("0000:82:00.0")) != 0 || h.Records(t, "0000:82:00.0") != nil {
				t.Error("the instance's neighbour device was touched")
			}
		})
	}
}
