package app

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"github.com/scour-project/scour/pipeline"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/internal/testkit"
)

// The chain head leaves the host as records close: a log line with the
// signed head (which verifies with the host key and names the newest
// record), the gauge, and a WARN plus a counted event when the chain
// starts at record 1 (issue 31 item 10).
func TestChainHeadLeavesTheHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer, _, err := claims.LoadOrCreateKey(filepath.Join(t.TempDir(), "record-signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.SyncBuffer{}
	reg := prometheus.NewRegistry()
	heads := newChainHeads(slog.New(slog.NewJSONHandler(logs, nil)), reg)
	c, store := testCleaner(t, claims.WithSigner(signer), claims.WithChainHead(heads.advanced))
	if err := store.RegisterKey(ctx, "compute-1"); err != nil {
		t.Fatal(err)
	}
	var last string
	for _, dev := range []string{"0000:81:00.0", "0000:82:00.0"} {
		d := handlers.Device{RPUUID: "rp-" + dev, Address: hardware.Address(dev), ResourceClass: "CUSTOM_NVME"}
		res, err := c.Clean(ctx, handlers.CleanRequest{Device: d, Trigger: "interval"})
		if err != nil || res.Verdict != pipeline.VerdictClean {
			t.Fatalf("clean %s: %+v %v", dev, res, err)
		}
		if err := c.RecordReturned(ctx, res.RunID, d); err != nil {
			t.Fatal(err)
		}
		last = res.RunID
	}
	if got := testutil.ToFloat64(heads.head); got != 2 {
		t.Errorf("scour_records_chain_head = %v, want 2", got)
	}
	if got := testutil.ToFloat64(heads.events.WithLabelValues("chain_started")); got != 1 {
		t.Errorf("chain_started events = %v, want 1", got)
	}
	var advanced []claims.ChainHead
	var warned bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l struct {
			Level, Msg, Head string
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch {
		case l.Msg == "record chain advanced":
			h, err := claims.VerifyHead([]byte(l.Head), []ed25519.PublicKey{signer.PublicKey()})
			if err != nil {
				t.Fatalf("logged head does not verify: %v\n%s", err, l.Head)
			}
			advanced = append(advanced, h)
		case strings.HasPrefix(l.Msg, "record chain started") && l.Level == "WARN":
			warned = true
		}
	}
	if len(advanced) != 2 || advanced[1].HostSeq != 2 || advanced[1].RunID != last {
		t.Fatalf("heads logged = %+v; want records 1 and 2 (run %s)", advanced, last)
	}
	if !warned {
		t.Errorf("no WARN for the chain starting at record 1:\n%s", logs.String())
	}
	// At the next start the gauge comes from the store.
	again := newChainHeads(slog.New(slog.DiscardHandler), nil)
	if err := again.started(ctx, store, "compute-1"); err != nil || testutil.ToFloat64(again.head) != 2 {
		t.Fatalf("gauge at start = %v, %v; want 2", testutil.ToFloat64(again.head), err)
	}
}
