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
