package claims

import (
	"context"
	"testing"
)

// HostHasRecords finds each kind of row that is keyed by host (a claim, a
// cleaning run, a quarantine, a record key) and only for that host: scourd
// uses it at start to notice a host name changed under an existing store.
func TestHostHasRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg, WithSigner(testSigner(t)))
		has := func(host string) bool {
			t.Helper()
			ok, err := s.HostHasRecords(ctx, host)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if has("cmp-claim") {
			t.Fatal("a fresh store holds records")
		}
		c := gpuClaim("inst-1", "rp-a")
		c.Host = "cmp-claim"
		if _, err := s.RecordClaim(ctx, c); err != nil {
			t.Fatal(err)
		}
		rs := nvmeRun()
		rs.Host = "cmp-run"
		if _, _, err := s.OpenRun(ctx, rs); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Retire(ctx, "cmp-quarantine", "rp-1", "0000:81:00.0", "alice", "RMA", "", ""); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterKey(ctx, "cmp-key"); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"cmp-claim", "cmp-run", "cmp-quarantine", "cmp-key"} {
			if !has(h) {
				t.Errorf("HostHasRecords(%s) = false; the store holds its rows", h)
			}
		}
		if has("cmp-claim.example.com") || has("cmp") {
			t.Error("HostHasRecords of a host without rows = true")
		}
	})
}
