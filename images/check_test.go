package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gimages "github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

// An image without multihash is refused unless the operator allows md5;
// then the check is recorded as md5. (A real Glance always computes
// multihash, so this is checked here rather than end to end.)
func TestCheckLegacyChecksum(t *testing.T) {
	t.Parallel()
	c, err := OpenCache(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	m := &gimages.Image{ID: "i1", Name: "old", Status: gimages.ImageStatusActive, Checksum: "ABCDEF0123456789abcdef0123456789", SizeBytes: 10, Properties: map[string]any{}}
	strict := NewGlance(nil, c, GlanceConfig{}, nil, nil)
	_, err = strict.check(Ref{ID: "i1"}, m)
	if ReasonOf(err) != ReasonNoMultihash || !strings.Contains(err.Error(), "allow_md5") {
		t.Fatalf("without allow_md5: %v, want a no_multihash refusal naming allow_md5", err)
	}
	lax := NewGlance(nil, c, GlanceConfig{AllowMD5: true}, nil, nil)
	img, err := lax.check(Ref{ID: "i1"}, m)
	if err != nil || img.HashAlgo != "md5" || img.Checked != "md5" || img.HashValue != "abcdef0123456789abcdef0123456789" {
		t.Fatalf("with allow_md5: %+v, %v; want checked md5", img, err)
	}
	m.Properties = map[string]any{"os_hash_algo": "sha512", "os_hash_value": strings.Repeat("AA", 64)}
	if img, _ := lax.check(Ref{ID: "i1"}, m); img.Checked != "sha512" {
		t.Fatalf("multihash present: checked %q, want sha512 even with allow_md5", img.Checked)
	}
	m.Properties = map[string]any{"os_hash_algo": "blake2b", "os_hash_value": "aa"}
	if _, err := lax.check(Ref{ID: "i1"}, m); ReasonOf(err) != ReasonNoMultihash {
		t.Fatalf("unknown algorithm: %v, want a refusal", err)
	}
}

// A local file is hashed while it is copied privately: the Image's Path
// is that copy, unchanged when the file is replaced after the check.
func TestFilesFetchUsesTheVerifiedBytes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "golden.bin")
	if err := os.WriteFile(file, []byte("golden"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("golden"))
	img, err := Files{}.Fetch(context.Background(), Ref{File: file, SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("tenant"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(img.Path); err != nil || string(b) != "golden" {
		t.Fatalf("Image.Path holds %q (%v) after the file changed, want the verified bytes", b, err)
	}
	img.Release()
	if _, err := os.Stat(img.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the private copy is still there after Remove: %v", err)
	}
	if _, err := (Files{}).Fetch(context.Background(), Ref{File: file, SHA256: hex.EncodeToString(sum[:])}); err == nil {
		t.Error("a file that no longer matches its sha256 was accepted")
	}
}
