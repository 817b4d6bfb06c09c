package examples_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/plugins/runner"
)

// installExamples puts both example plugins into a root-owned plugin dir.
func installExamples(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("plugins must be root-owned: run as root")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "zero-file"), "./zero-file")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sh, err := os.ReadFile("shell/zero-media")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "zero-media"), sh, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func media(t *testing.T, size int) plugins.Media {
	p := filepath.Join(t.TempDir(), "media")
	os.WriteFile(p, bytes.Repeat([]byte{0xab}, size), 0o600)
	return plugins.Media{Path: p, Size: int64(size)}
}

func TestExamplePlugins(t *testing.T) {
	dir := installExamples(t)
	r, err := runner.New(runner.Config{Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"zero-file", "zero-media"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			v, err := r.Version(ctx, path)
			if err != nil || v != "1.0" {
				t.Fatalf("VERSION: %q %v", v, err)
			}
			ms := []plugins.Media{media(t, 3<<20+17), media(t, 5000)}
			req := &plugins.Request{Step: "zero", Device: plugins.Device{Address: "0000:01:00.0", Kind: "nvme", Media: ms},
				ResourceProvider: plugins.ResourceProvider{UUID: "rp"}, Args: map[string]any{"block_kib": 64}}
			before := sums(t, ms)
			if _, err := r.Check(ctx, path, v, req); err != nil {
				t.Fatalf("CHECK: %v", err)
			}
			if after := sums(t, ms); !bytes.Equal(before, after) {
				t.Fatal("CHECK modified the media")
			}
			var progress []float64
			res, err := r.Clean(ctx, path, v, req, func(f float64) { progress = append(progress, f) })
			if err != nil {
				t.Fatalf("CLEAN: %v", err)
			}
			if len(progress) == 0 || progress[len(progress)-1] != 1 {
				t.Errorf("progress %v does not end at 1", progress)
			}
			// An erase that reports no technique does not count in a clear
			// or purge pipeline's run (the claims store refuses it clean):
			// the examples did not, and such a pipeline quarantined every
			// device (second review, M3).
			if tech, _ := res.Details[plugins.TechniqueKey].(string); !strings.HasPrefix(tech, "overwrite, 1 pass of 0x00") {
				t.Errorf("CLEAN details %v: technique %q, want the overwrite it applied", res.Details, tech)
			}
			for _, m := range ms {
				b, _ := os.ReadFile(m.Path)
				if int64(len(b)) != m.Size || !bytes.Equal(b, make([]byte, m.Size)) {
					t.Errorf("%s: not all zeros (len %d, want %d) after CLEAN %+v", m.Path, len(b), m.Size, res)
				}
			}
			// A device without media is unsupported (code 2), which a
			// step's on_unsupported turns into skip or fail.
			req.Device.Media = nil
			if _, err := r.Check(ctx, path, v, req); plugins.CodeOf(err) != plugins.CodeUnsupported {
				t.Errorf("CHECK without media: %v", err)
			}
			// A media of size 0 (a namespace the block layer cannot use)
			// is no wipe: CLEAN fails permanently instead of writing
			// nothing and answering ok.
			req.Device.Media = []plugins.Media{media(t, 0)}
			if _, err := r.Clean(ctx, path, v, req, func(float64) {}); plugins.CodeOf(err) != plugins.CodePermanent {
				t.Errorf("CLEAN of a size-0 media: %v, want a permanent failure", err)
			}
		})
	}
}

func sums(t *testing.T, ms []plugins.Media) []byte {
	h := sha256.New()
	for _, m := range ms {
		b, _ := os.ReadFile(m.Path)
		h.Write(b)
	}
	return h.Sum(nil)
}

// docs/plugins.md shows the shell example verbatim; keep them in step.
func TestDocsShowTheShellExample(t *testing.T) {
	script, err := os.ReadFile("shell/zero-media")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/plugins.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, script) {
		t.Fatal("docs/plugins.md does not contain plugins/examples/shell/zero-media verbatim: copy the script into the doc")
	}
}
