package app

import (
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/placement"
)

// scourctl retire of a device whose quarantine stands says what it is
// and where its retirement wipe is, instead of only "that reason stands".
func TestAlreadyRetiredSaysItsWipeState(t *testing.T) {
	t.Parallel()
	d := placement.Device{Ref: placement.Ref{UUID: "rp-1", Address: "0000:81:00.0"}}
	for _, tc := range []struct {
		q    claims.Quarantine
		want []string
	}{
		{claims.Quarantine{Reason: "retired by alice: RMA; wipe pending", Wipe: claims.WipePending}, []string{"already retired", "retirement wipe is pending"}},
		{claims.Quarantine{Reason: "retired by alice: shred", Wipe: claims.WipeDeclined}, []string{"already retired", "NOT WIPED"}},
		{claims.Quarantine{RunID: "run-7", Reason: "sanitize failed; retired by alice: RMA", Wipe: claims.WipePending}, []string{"quarantined by run run-7", "retirement wipe is pending"}},
		{claims.Quarantine{Reason: "retired by alice: RMA; retirement run r: RETIRED UNWIPED"}, []string{"already retired", "RETIRED UNWIPED", "no retirement wipe waits"}},
	} {
		got := alreadyRetired(d, tc.q)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("alreadyRetired(%+v) = %q; want it to say %q", tc.q, got, w)
			}
		}
	}
}
