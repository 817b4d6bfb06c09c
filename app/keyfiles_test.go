package app

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
)

// A recreated signing key: the log names the rewritten public key file,
// the new key id, and where the old public key was kept.
func TestLogKeyFilesRecreatedKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "record-signing.key")
	old, _, err := claims.LoadOrCreateKey(path)
	if err == nil {
		err = os.Remove(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	signer, kf, err := claims.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logKeyFiles(slog.New(slog.NewTextHandler(&buf, nil)), path, signer, kf)
	out := buf.String()
	for _, want := range []string{`level=WARN msg="record signing key created`, "record signing key changed", "public_key=" + path + ".pub",
		"key_id=" + claims.KeyID(signer.PublicKey()), "old_key_id=" + claims.KeyID(old.PublicKey()), "old_public_key=" + kf.OldPub} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
