// Command zero-file is an example scour plugin in Go: CLEAN writes zeros
// over every media path of the device and syncs it; CHECK says whether the
// media paths exist and are writable, without touching them.
//
// Install: go build -o /usr/libexec/scour/plugins/zero-file ./plugins/examples/zero-file
// (root-owned, mode 0755), then reference it from a pipeline step.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/plugins/skel"
)

const chunk = 1 << 20

func main() { skel.PluginMain(clean, check, []string{plugins.ProtocolVersion}) }

func check(_ context.Context, req *plugins.Request, _ skel.Progress) (*plugins.Result, error) {
	if len(req.Device.Media) == 0 {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "device %s has no media to zero", req.Device.Address)
	}
	for _, m := range req.Device.Media {
		f, err := os.OpenFile(m.Path, os.O_WRONLY, 0) // opening for write changes nothing
		if err != nil {
			return nil, plugins.Errorf(plugins.CodeUnsupported, "media %s: %v", m.Path, err)
		}
		f.Close()
	}
	return plugins.OK(map[string]any{"media": len(req.Device.Media)}), nil
}

func clean(ctx context.Context, req *plugins.Request, progress skel.Progress) (*plugins.Result, error) {
	var total int64
	for _, m := range req.Device.Media {
		if m.Size <= 0 { // a namespace the block layer cannot use: writing nothing is no wipe
			return nil, plugins.Errorf(plugins.CodePermanent, "media %s of %s has size 0: nothing can be written to it, so its data may still be there", m.Path, req.Device.Address)
		}
		total += m.Size
	}
	zeros := make([]byte, chunk)
	var done int64
	for _, m := range req.Device.Media {
		if err := zero(ctx, m, zeros, func(n int64) {
			done += n
			progress(float64(done)/float64(max(total, 1)), m.Path)
		}); err != nil {
			return nil, err
		}
	}
	// The technique it applied: a clear or purge pipeline's run counts this
	// erase only when its step reports one (docs/pipelines.md, Category).
	return plugins.OK(map[string]any{"bytes": done, plugins.TechniqueKey: technique}), nil
}

// technique is what CLEAN reports under details.technique.
const technique = "overwrite, 1 pass of 0x00 (fsync)"

func zero(ctx context.Context, m plugins.Media, zeros []byte, wrote func(int64)) error {
	f, err := os.OpenFile(m.Path, os.O_WRONLY, 0)
	if err != nil {
		return plugins.Errorf(plugins.CodeTryAgainLater, "opening %s: %v", m.Path, err)
	}
	defer f.Close()
	for off := int64(0); off < m.Size; off += chunk {
		if err := ctx.Err(); err != nil {
			return plugins.Errorf(plugins.CodeTryAgainLater, "interrupted: %v", err)
		}
		n := min(chunk, m.Size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return plugins.Errorf(plugins.CodeTryAgainLater, "writing %s at %d: %v", m.Path, off, err)
		}
		wrote(n)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", m.Path, err)
	}
	return nil
}
