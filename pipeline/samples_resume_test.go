package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// TestCryptoVerifySurvivesResume: a crypto sanitize that reports success
// but erases nothing (lying firmware) is caught by the verify after it,
// whether or not scourd restarted between the two. Without a restart the
// samples in memory catch it. After one, the erase step's record comes
// back from the claims store, which drops details over 4096 bytes (two
// namespaces' samples are more): the resumed verify must fail closed
// (try again later, never "not applicable"), and the next run must repeat
// the erase and catch the firmware from its own samples. Found in review
// (rev1 High 1): the resumed verify was skipped and the run came out clean.
func TestCryptoVerifySurvivesResume(t *testing.T) {
	for name, cfg := range claimsStores {
		for _, interrupted := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/interrupted=%v", name, interrupted), func(t *testing.T) { cryptoVerifyAcrossResume(t, cfg(t), interrupted) })
		}
	}
}

func cryptoVerifyAcrossResume(t *testing.T, storeCfg claims.Config, interrupted bool) {
	store := openClaims(t, storeCfg)
	// Two namespaces holding tenant data (blocks that are not uniform).
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	var media []hardware.Media
	for _, n := range []string{"ns1", "ns2"} {
		p := filepath.Join(t.TempDir(), n)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		media = append(media, hardware.Media{Path: p, Size: int64(len(data))})
	}
	cfg := pipeline.Config{PluginDirs: []string{"/plugins"}, Profiles: []pipeline.Profile{{
		Name: "nvme", Match: pipeline.Match{ResourceClasses: []string{"CUSTOM_NVME"}},
		Pipeline: pipeline.Pipeline{Name: "std", Version: 1, HomeDriver: "nvme", Steps: []pipeline.Step{
			{Name: "erase", Type: "nvme-sanitize", Args: map[string]any{"action": "crypto"}},
			{Name: "b", Type: pipeline.TypePlugin, Path: "/plugins/b"}, // where scourd stops
			{Name: "verify", Type: "verify"},
		}}}}}
	var sanitized atomic.Int32
	be := &fakehw.Backend{
		DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
			caps := hardware.Capabilities{"nvme.sanitize": {Kind: hardware.KindOrdered, Items: []string{"crypto"}}}
			return &hardware.Device{Address: a, Kind: hardware.KindNVMe, Driver: "nvme", Serial: "S1",
				Capabilities: caps, NVMe: &hardware.NVMeInfo{Controller: "nvme0", Namespaces: []string{media[0].Path, media[1].Path}}}, nil
		},
		SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
			sanitized.Add(1)
			return nil // the lying firmware: success, nothing erased
		},
		MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return media, nil },
	}
	engine := func(pr *plugs) *pipeline.Engine { return claimsEngine(t, store, cfg, be, pr) }
	tg := pipeline.Target{Address: "0000:81:00.0", RPUUID: "rp-1", ResourceClass: "CUSTOM_NVME"}
	clean := func() *pipeline.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := engine(&plugs{}).Clean(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	caught := func(res *pipeline.Result) {
		t.Helper()
		if res.Verdict != pipeline.VerdictQuarantine || res.Step != "verify" || res.Code != plugins.CodePermanent {
			t.Fatalf("a crypto sanitize that erased nothing: verdict %s at %s (code %d): %s", res.Verdict, res.Step, res.Code, res.Reason)
		}
	}
	if !interrupted {
		caught(clean())
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := engine(&plugs{block: cancel}).Clean(ctx, tg); err == nil {
		t.Fatal("interrupted run reported a verdict")
	}
	res := clean()
	if res.Verdict != pipeline.VerdictRetryLater || res.Step != "verify" || res.Code != plugins.CodeTryAgainLater || sanitized.Load() != 1 {
		t.Fatalf("resumed after the erase whose samples the store dropped: verdict %s at %s (code %d), %d sanitize(s): %s; want retry-later at verify, the erase not repeated in this run",
			res.Verdict, res.Step, res.Code, sanitized.Load(), res.Reason)
	}
	// The next run repeats the erase and verifies it from its own samples.
	caught(clean())
	if sanitized.Load() != 2 {
		t.Fatalf("the run after the failed-closed verify ran %d sanitize(s) in all, want the erase repeated (2)", sanitized.Load())
	}
}
