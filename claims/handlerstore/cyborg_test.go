package handlerstore

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
)

// An ARQ record is kept once per (host, instance, device), the first one
// standing, survives a reopen of the store (a restarted scourd), and is
// scoped to its host.
func TestARQRecordKeptOnceAndAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	cfg := claims.Config{StatePath: filepath.Join(t.TempDir(), "state")}
	open := func() *claims.Store {
		st, err := claims.Open(ctx, cfg, claims.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	c := &Claims{Store: st, Host: "compute-1"}
	first := handlers.ARQRecord{Instance: "inst-a", DeviceRP: "rp-1", ARQ: "arq-1", ARQDeviceRP: "rp-1", ARQHostname: "compute-1",
		AttachHandleType: "PCI", Address: "0000:3b:00.0", Agree: true}
	if err := c.RecordARQ(ctx, first); err != nil {
		t.Fatal(err)
	}
	later := first
	later.ARQ, later.Agree, later.Detail = "arq-2", false, "replayed"
	if err := c.RecordARQ(ctx, later); err != nil {
		t.Fatal(err)
	}
	st.Close()

	st = open()
	defer st.Close()
	c = &Claims{Store: st, Host: "compute-1"}
	for _, q := range []struct {
		host, inst, rp string
		want           bool
	}{{"compute-1", "inst-a", "rp-1", true}, {"compute-1", "inst-a", "rp-2", false}, {"compute-2", "inst-a", "rp-1", false}} {
		got, err := (&Claims{Store: st, Host: q.host}).ARQRecorded(ctx, q.inst, q.rp)
		if err != nil || got != q.want {
			t.Errorf("ARQRecorded(%s, %s, %s) = %v, %v; want %v", q.host, q.inst, q.rp, got, err, q.want)
		}
	}
	recs, err := st.ARQRecords(ctx, "compute-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ARQ != "arq-1" || recs[0].Result != "agree" || recs[0].Address != "0000:3b:00.0" || recs[0].RecordedAt.IsZero() {
		t.Fatalf("records after a replay and a reopen = %+v, want the first only", recs)
	}
}
