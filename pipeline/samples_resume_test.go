package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestUnreadableNamespaceFailsCryptoVerify: before a crypto erase the
// erase step samples every namespace so that verify can check the
// tenant's data changed. One namespace that cannot be read (a tenant can
// cause the I/O error) used to drop every sample silently: verify was
// skipped as "no blocks could be sampled" and the run came out clean,
// even after a sanitize that erased nothing. Now the namespaces that
// could be read keep their samples (a sanitize that erased nothing is
// caught on them: quarantine), and the sampling error is recorded in the
// erase step's details and fails the verify as try-again-later (the
// device stays reserved), also when scourd restarted between the erase
// and the verify with no sample at all to compare (its only namespace
// unreadable: the claims store keeps the error). Found in review (M5).
func TestUnreadableNamespaceFailsCryptoVerify(t *testing.T) {
	for name, cfg := range claimsStores {
		for _, tc := range []struct {
			erases, interrupted bool
		}{{false, false}, {true, false}, {true, true}} {
			t.Run(fmt.Sprintf("%s/erases=%v/interrupted=%v", name, tc.erases, tc.interrupted), func(t *testing.T) {
				unreadableNamespace(t, cfg(t), tc.erases, tc.interrupted)
			})
		}
	}
}

func unreadableNamespace(t *testing.T, storeCfg claims.Config, erases, interrupted bool) {
	store := openClaims(t, storeCfg)
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	ns1 := filepath.Join(t.TempDir(), "ns1")
	if err := os.WriteFile(ns1, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ns2 := t.TempDir() // a directory: opened, but every read fails (EISDIR)
	media := []hardware.Media{{Path: ns1, Size: int64(len(data))}, {Path: ns2, Size: int64(len(data))}}
	unreadable := "namespace 2 of 0000:81:00.0"
	if interrupted { // no sample survives or is lost: only the error fails the verify
		media, unreadable = media[1:], "namespace 1 of 0000:81:00.0"
	}
	steps := []pipeline.Step{{Name: "erase", Type: "nvme-sanitize", Args: map[string]any{"action": "crypto"}}}
	if interrupted {
		steps = append(steps, pipeline.Step{Name: "b", Type: pipeline.TypePlugin, Path: "/plugins/b"}) // where scourd stops
	}
	steps = append(steps, pipeline.Step{Name: "verify", Type: "verify"})
	cfg := pipeline.Config{PluginDirs: []string{"/plugins"}, Profiles: []pipeline.Profile{{
		Name: "nvme", Match: pipeline.Match{ResourceClasses: []string{"CUSTOM_NVME"}},
		Pipeline: pipeline.Pipeline{Name: "std", Version: 1, HomeDriver: "nvme", Steps: steps}}}}
	be := &fakehw.Backend{
		DiscoverF: func(_ context.Context, a hardware.Address) (*hardware.Device, error) {
			caps := hardware.Capabilities{"nvme.sanitize": {Kind: hardware.KindOrdered, Items: []string{"crypto"}}}
			return &hardware.Device{Address: a, Kind: hardware.KindNVMe, Driver: "nvme", Serial: "S1",
				Capabilities: caps, NVMe: &hardware.NVMeInfo{Controller: "nvme0", Namespaces: mediaPaths(media)}}, nil
		},
		SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
			if !erases {
				return nil // the lying firmware: success, nothing erased
			}
			noise := make([]byte, len(data))
			for i := range noise {
				noise[i] = byte(i*13 + i/512 + 1)
			}
			return os.WriteFile(ns1, noise, 0o600)
		},
		MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return media, nil },
	}
	tg := pipeline.Target{Address: "0000:81:00.0", RPUUID: "rp-1", ResourceClass: "CUSTOM_NVME"}
	if interrupted {
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := claimsEngine(t, store, cfg, be, &plugs{block: cancel}).Clean(ctx, tg); err == nil {
			t.Fatal("interrupted run reported a verdict")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := claimsEngine(t, store, cfg, be, &plugs{}).Clean(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if !erases {
		if res.Verdict != pipeline.VerdictQuarantine || res.Step != "verify" || res.Code != plugins.CodePermanent {
			t.Fatalf("a crypto sanitize that erased nothing, one namespace unreadable: verdict %s at %s (code %d): %s; want quarantine at verify (namespace 1 unchanged)",
				res.Verdict, res.Step, res.Code, res.Reason)
		}
		return
	}
	if res.Verdict != pipeline.VerdictRetryLater || res.Step != "verify" || res.Code != plugins.CodeTryAgainLater ||
		!strings.Contains(res.Reason, "could not be sampled") || !strings.Contains(res.Reason, unreadable) {
		t.Fatalf("a crypto erase with a namespace unreadable before it: verdict %s at %s (code %d): %s; want retry-later at verify naming %s",
			res.Verdict, res.Step, res.Code, res.Reason, unreadable)
	}
	erase, verify := res.Steps[0], res.Steps[len(res.Steps)-1]
	if why, _ := erase.Details[plugins.SampleErrorKey].(string); !strings.Contains(why, unreadable) {
		t.Fatalf("erase step's details %v: want why %s could not be sampled under %s", erase.Details, unreadable, plugins.SampleErrorKey)
	}
	if v, _ := verify.Details[plugins.VerificationKey].(map[string]any); verify.State != pipeline.StepFailed || v["result"] != plugins.VerifyFailed {
		t.Fatalf("verify %s with details %v: want failed, its verification failed", verify.State, verify.Details)
	}
}

func mediaPaths(media []hardware.Media) []string {
	var out []string
	for _, m := range media {
		out = append(out, m.Path)
	}
	return out
}
