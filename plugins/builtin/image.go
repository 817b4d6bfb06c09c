package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/scour-project/scour/plugins"
)

// GoldenImage is a known-good image resolved to verified local bytes:
// Path holds exactly the bytes whose hash is HashValue.
type GoldenImage struct {
	// ID is the image's id where it came from (a Glance image id; "" for
	// a local file), Name its name.
	ID, Name string
	// HashAlgo and HashValue are the hash the bytes were verified against
	// ("sha256", "sha512" as Glance's os_hash_algo).
	HashAlgo, HashValue string
	Size                int64
	Path                string
	// Source says where the image came from: "file" or "glance".
	Source string
	// Properties are the image's properties (Glance's, or the local
	// reference's bitstream_id): the id a device must report after
	// programming is one of them.
	Properties map[string]string
}

// Map is the image as the cleaning record names it.
func (g *GoldenImage) Map() map[string]any {
	return map[string]any{"id": g.ID, "name": g.Name, "hash_algo": g.HashAlgo, "hash_value": g.HashValue,
		"size": g.Size, "source": g.Source}
}

// ImageResolver resolves an image reference (args.image) to verified
// local bytes. The images package resolves Glance references (an id, or
// a query by property); steps resolve local files themselves.
type ImageResolver interface {
	Resolve(ctx context.Context, ref map[string]any) (*GoldenImage, error)
}

// imageRef reads args.image: a map with file + sha256 (+ bitstream_id,
// name), or a Glance reference (glance_id or glance_query) left to the
// engine's ImageResolver.
func imageRef(a map[string]any) (map[string]any, error) {
	raw, ok := a["image"]
	if !ok || raw == nil {
		return nil, errors.New("image: required (file: <path> with sha256:, or glance_id:, or glance_query:)")
	}
	ref, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("image: %v (%T) is not a map (file: <path> with sha256:, or glance_id:, or glance_query:)", raw, raw)
	}
	if _, local := ref["file"]; !local {
		if ref["glance_id"] == nil && ref["glance_query"] == nil {
			return nil, errors.New("image: give file: (with sha256:), glance_id: or glance_query:")
		}
		return ref, nil
	}
	var errs []error
	for k, v := range ref {
		switch k {
		case "file", "sha256", "bitstream_id", "name":
			if s, ok := v.(string); !ok || s == "" {
				errs = append(errs, fmt.Errorf("image.%s: want a non-empty string", k))
			}
		default:
			errs = append(errs, fmt.Errorf("image.%s: unknown with file: (known: file, sha256, bitstream_id, name)", k))
		}
	}
	if f, _ := ref["file"].(string); f != "" && !filepath.IsAbs(f) {
		errs = append(errs, fmt.Errorf("image.file %q: want an absolute path", f))
	}
	if s, ok := ref["sha256"].(string); !ok {
		errs = append(errs, errors.New("image.sha256: required with file: (the image is checked before it is used)"))
	} else if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		errs = append(errs, fmt.Errorf("image.sha256: %q is not 64 hex digits", s))
	}
	return ref, errors.Join(errs...)
}

// resolveImage checks a local image against its sha256, or asks the
// resolver for a Glance one. A local file that does not match is a
// config error: nothing touches the device.
func resolveImage(ctx context.Context, t *Target) (*GoldenImage, error) {
	ref, err := imageRef(t.Args)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: %v", t.Step, err)
	}
	file, _ := ref["file"].(string)
	if file == "" {
		if t.Images == nil {
			return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: image %v names Glance, but scourd has no image service configured", t.Step, ref)
		}
		img, err := t.Images.Resolve(ctx, ref)
		if err != nil {
			pe := *plugins.AsError(err)
			pe.Msg = fmt.Sprintf("step %s: golden image %v for %s: %s", t.Step, ref, t.Device.Address, pe.Msg)
			return nil, &pe
		}
		return img, nil
	}
	want := ref["sha256"].(string)
	sum, err := plugins.FileSHA256(file)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: golden image %s for %s: %v", t.Step, file, t.Device.Address, err)
	}
	if !strings.EqualFold(sum, want) {
		return nil, &plugins.Error{Code: plugins.CodeInvalidConfig,
			Msg:     fmt.Sprintf("step %s: golden image %s has sha256 %s, config says %s: refusing to program %s (fix the image or the checksum)", t.Step, file, sum, want, t.Device.Address),
			Details: map[string]any{"image_file": file, "sha256": sum, "expected_sha256": want}}
	}
	size, err := fileSize(file)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: golden image %s: %v", t.Step, file, err)
	}
	name, _ := ref["name"].(string)
	if name == "" {
		name = filepath.Base(file)
	}
	props := map[string]string{}
	if id, _ := ref["bitstream_id"].(string); id != "" {
		props["bitstream_id"] = id
	}
	return &GoldenImage{Name: name, HashAlgo: "sha256", HashValue: strings.ToLower(sum), Size: size, Path: file, Source: "file", Properties: props}, nil
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
