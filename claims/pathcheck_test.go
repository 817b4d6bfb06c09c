package claims

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckKey refuses what LoadOrCreateKey would refuse, creating nothing:
// a key file anyone may read, a key directory that cannot be created.
func TestCheckKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := filepath.Join(dir, "state", "record-signing.key")
	if err := CheckKey(key); err != nil {
		t.Fatalf("a key to be created in a creatable directory: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(key)); !os.IsNotExist(err) {
		t.Fatalf("CheckKey created %s", filepath.Dir(key))
	}
	if _, _, err := LoadOrCreateKey(key); err != nil {
		t.Fatal(err)
	}
	if err := CheckKey(key); err != nil {
		t.Fatalf("the key LoadOrCreateKey made: %v", err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckKey(key); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key: %v, want LoadOrCreateKey's refusal", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckKey(filepath.Join(file, "k")); err == nil || !strings.Contains(err.Error(), file+" is not a directory") {
		t.Errorf("a key under a file: %v", err)
	}
}
