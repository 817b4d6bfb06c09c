package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/scour-project/scour/plugins"
)

// TestZeroSizeMediaIsNotCleaned: Linux reports size 0 for a namespace
// whose LBA format the block layer cannot use (a tenant's `nvme format
// -l`); the plugin must fail permanently, not answer ok having written
// nothing. Found in review (rev1 Medium 2).
func TestZeroSizeMediaIsNotCleaned(t *testing.T) {
	p := filepath.Join(t.TempDir(), "media")
	tenant := bytes.Repeat([]byte{0xab}, 1<<20)
	if err := os.WriteFile(p, tenant, 0o600); err != nil {
		t.Fatal(err)
	}
	req := &plugins.Request{Device: plugins.Device{Address: "0000:01:00.0", Media: []plugins.Media{{Path: p, Size: 0}}}}
	res, err := clean(context.Background(), req, func(float64, string) {})
	if plugins.CodeOf(err) != plugins.CodePermanent {
		t.Fatalf("CLEAN of a size-0 media: %v (details %v), want a permanent failure", err, res)
	}
}

// TestCleanReportsItsTechnique: a clear or purge pipeline's run counts an
// erase only when its step reports details.technique; zero-file reported
// none, so such a pipeline quarantined every device it cleaned (second
// review, M3). CLEAN reports the overwrite it applied; CHECK, which
// erases nothing, reports none.
func TestCleanReportsItsTechnique(t *testing.T) {
	p := filepath.Join(t.TempDir(), "media")
	if err := os.WriteFile(p, bytes.Repeat([]byte{0xab}, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	req := &plugins.Request{Device: plugins.Device{Address: "0000:01:00.0", Media: []plugins.Media{{Path: p, Size: 5000}}}}
	res, err := clean(context.Background(), req, func(float64, string) {})
	if err != nil {
		t.Fatal(err)
	}
	if tech, _ := res.Details[plugins.TechniqueKey].(string); tech != "overwrite, 1 pass of 0x00 (fsync)" {
		t.Fatalf("CLEAN details %v: technique %q, want the overwrite it applied", res.Details, tech)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, make([]byte, 5000)) {
		t.Fatal("media not zeroed")
	}
	res, err = check(context.Background(), req, func(float64, string) {})
	if err != nil || res.Details[plugins.TechniqueKey] != nil {
		t.Fatalf("CHECK = %v, %v; want ok without a technique", res, err)
	}
}
