package fscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWritableDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, want string // want: "" for no error, else a part of it
	}{
		{"existing directory", root, ""},
		{"missing directories under a writable one", filepath.Join(root, "a", "b", "c"), ""},
		{"the directory is a file", file, file + " is not a directory"},
		{"a file on the way", filepath.Join(file, "state", "x"), file + " is not a directory"},
	} {
		err := WritableDir(tc.dir)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
	// Checking created nothing.
	if _, err := os.Stat(filepath.Join(root, "a")); !os.IsNotExist(err) {
		t.Errorf("WritableDir created %s/a (stat: %v)", root, err)
	}
}

// A directory this process may not write into is refused, naming the uid.
// Root passes permission bits, so for root the directory is one the
// kernel refuses to root too (a process's /proc entry).
func TestWritableDirRefusesADirectoryItCannotWrite(t *testing.T) {
	t.Parallel()
	dir := "/proc/1"
	if os.Geteuid() != 0 {
		dir = t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	}
	err := WritableDir(filepath.Join(dir, "scour"))
	if err == nil || !strings.Contains(err.Error(), dir+": cannot create") || !strings.Contains(err.Error(), "checked as uid") {
		t.Fatalf("WritableDir(%s/scour) = %v, want a refusal naming %s and the uid", dir, err, dir)
	}
}
