package hardware

import (
	"context"
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
// than guessing. Answers are cached for the process's life.
func (r *Real) ToolVersions(ctx context.Context, names []string) map[string]string {
	out := make(map[string]string, len(names))
	for _, n := range names {
		if v, ok := r.versions.Load(n); ok {
			out[n] = v.(string)
			continue
		}
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
		b, err := r.run.Run(ctx, path, args...)
		if err != nil {
			r.log.Warn("tool version unknown; records name the tool without it", "tool", n, "err", err)
			continue
		}
		v, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if v = strings.TrimSpace(v); v != "" {
			r.versions.Store(n, v)
			out[n] = v
		}
	}
	return out
}
