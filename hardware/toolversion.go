package hardware

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// External tools a built-in step may run through the real backend, by
// the names records use.
const (
	ToolNVMeCLI = "nvme-cli"
	ToolDevlink = "devlink"
)

// ToolVersions returns the version line of each named tool (ToolNVMeCLI,
// ToolDevlink) that answers, for the cleaning record. A tool that cannot
// say is left out: the record then names it without a version rather
// than guessing. An answer is cached for the binary it came from (its
// resolved path, size and modification time), so a tool upgraded while
// scourd runs (apt upgrade nvme-cli) is asked again, and one that cannot
// be found is asked every time.
func (r *Real) ToolVersions(ctx context.Context, names []string) map[string]string {
	out := make(map[string]string, len(names))
	for _, n := range names {
		var path string
		var args []string
		switch n {
		case ToolNVMeCLI:
			path, args = r.cfg.Tools.NVMe, []string{"version"}
		case ToolDevlink:
			path, args = r.cfg.Tools.Devlink, []string{"-V"}
		default:
			continue
		}
		key := binaryKey(path)
		if v, ok := r.versions.Load(key); ok && key != "" {
			out[n] = v.(string)
			continue
		}
		b, err := r.run.Run(ctx, path, args...)
		if err != nil {
			r.log.Warn("tool version unknown; records name the tool without it", "tool", n, "err", err)
			continue
		}
		v, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if v = strings.TrimSpace(v); v != "" {
			if key != "" {
				r.versions.Store(key, v)
			}
			out[n] = v
		}
	}
	return out
}

// binaryKey identifies the file path runs now: its resolved path, size
// and modification time; "" when it cannot be found.
func binaryKey(path string) string {
	p, err := exec.LookPath(path)
	if err != nil {
		return ""
	}
	if q, err := filepath.EvalSymlinks(p); err == nil {
		p = q
	}
	fi, err := os.Stat(p)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s\x00%d\x00%d", p, fi.Size(), fi.ModTime().UnixNano())
}
