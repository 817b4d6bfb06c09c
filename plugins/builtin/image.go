package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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
	// Release, when set, says the step is done with Path: until then
	// the resolver keeps it (a Glance image's cache entry is not
	// evicted). Steps call it once the image was programmed or copied.
	Release func()
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
//
// A local file is read once: its bytes are hashed while they are copied
// into a private directory (0700, PrivateCopy), and the step programs
// that copy, so the bytes programmed are the bytes verified even when
// the file is replaced or rewritten after the check. release removes the
// copy, or for a Glance image lets the cache evict the entry again (it
// is pinned until then: GoldenImage.Release); call it when the step is
// done with the image.
func resolveImage(ctx context.Context, t *Target) (img *GoldenImage, release func(), err error) {
	ref, err := imageRef(t.Args)
	if err != nil {
		return nil, nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: %v", t.Step, err)
	}
	file, _ := ref["file"].(string)
	if file == "" {
		if t.Images == nil {
			return nil, nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: image %v names Glance, but scourd has no image service configured", t.Step, ref)
		}
		img, err := t.Images.Resolve(ctx, ref)
		if err != nil {
			pe := *plugins.AsError(err)
			pe.Msg = fmt.Sprintf("step %s: golden image %v for %s: %s", t.Step, ref, t.Device.Address, pe.Msg)
			return nil, nil, &pe
		}
		release := img.Release
		if release == nil {
			release = func() {}
		}
		return img, release, nil
	}
	want := ref["sha256"].(string)
	cp, err := PrivateCopy(ctx, file)
	if errors.Is(err, ErrNoSpace) {
		return nil, nil, plugins.Errorf(plugins.CodeTryAgainLater, "step %s: golden image %s for %s: %v", t.Step, file, t.Device.Address, err)
	}
	if err != nil {
		return nil, nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: golden image %s for %s: %v", t.Step, file, t.Device.Address, err)
	}
	if !strings.EqualFold(cp.SHA256, want) {
		cp.Remove()
		return nil, nil, &plugins.Error{Code: plugins.CodeInvalidConfig,
			Msg:     fmt.Sprintf("step %s: golden image %s has sha256 %s, config says %s: refusing to program %s (fix the image or the checksum)", t.Step, file, cp.SHA256, want, t.Device.Address),
			Details: map[string]any{"image_file": file, "sha256": cp.SHA256, "expected_sha256": want}}
	}
	name, _ := ref["name"].(string)
	if name == "" {
		name = filepath.Base(file)
	}
	props := map[string]string{}
	if id, _ := ref["bitstream_id"].(string); id != "" {
		props["bitstream_id"] = id
	}
	return &GoldenImage{Name: name, HashAlgo: "sha256", HashValue: cp.SHA256, Size: cp.Size, Path: cp.Path, Source: "file", Properties: props}, cp.Remove, nil
}

// Copy is a private copy of a local image file (PrivateCopy).
type Copy struct {
	// Path is the copy, in a directory of its own that only this process's
	// user can enter (0700); the file is read-only (0400).
	Path string
	// SHA256 (lower-case hex) and Size are of exactly the bytes copied.
	SHA256 string
	Size   int64
	dir    string
}

// Remove deletes the copy and its directory.
func (c *Copy) Remove() { _ = os.RemoveAll(c.dir) }

// PrivateCopy opens src once and copies it into a new private directory
// (os.MkdirTemp, 0700) while hashing the bytes it copies: the copy holds
// exactly the bytes hashed, whatever becomes of src afterwards (replaced,
// rewritten in place, a symlink re-pointed), so a caller that compares
// Copy.SHA256 with a configured sum and then uses Copy.Path uses the bytes
// it verified. The caller removes it (Copy.Remove).
func PrivateCopy(ctx context.Context, src string) (*Copy, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", src, fi.Mode().Type())
	}
	dir, err := os.MkdirTemp("", "scour-image-*")
	if err != nil {
		return nil, fmt.Errorf("making a private directory for a copy of %s: %w", src, err)
	}
	c := &Copy{Path: filepath.Join(dir, filepath.Base(src)), dir: dir}
	out, err := os.OpenFile(c.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		c.Remove()
		return nil, fmt.Errorf("copying %s: %w", src, err)
	}
	h := sha256.New()
	c.Size, err = copyBytes(io.MultiWriter(out, h), ctxReader{ctx, in})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(c.Path, 0o400)
	}
	if err != nil {
		c.Remove()
		if errors.Is(err, syscall.ENOSPC) {
			return nil, noSpace(src, dir, fi.Size(), err)
		}
		return nil, fmt.Errorf("copying %s into %s: %w", src, dir, err)
	}
	c.SHA256 = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// ErrNoSpace: a private copy of an image ran out of space in its
// directory (ENOSPC). A host resource problem, not the image's or the
// step's config: retried later, the device stays reserved.
var ErrNoSpace = errors.New("no space left for the private copy of the image")

// noSpace words ENOSPC while copying src (size bytes) into dir: the
// directory, what the copy needs and what is free there.
func noSpace(src, dir string, size int64, err error) error {
	base := filepath.Dir(dir)
	free := "unknown"
	var st syscall.Statfs_t
	if syscall.Statfs(base, &st) == nil {
		free = fmt.Sprintf("%d bytes", uint64(st.Bavail)*uint64(st.Bsize))
	}
	return fmt.Errorf("copying %s (%d bytes) into a private directory under %s: %w (%v): the copy needs %d bytes free there, %s are; free space in %s (or point TMPDIR of scourd at a file system with room); the step is retried later: %w",
		src, size, base, ErrNoSpace, err, size, free, base, syscall.ENOSPC)
}

// copyBytes is io.Copy; tests replace it to make a copy fail as a full
// file system does.
var copyBytes = io.Copy

// ctxReader stops a long copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
