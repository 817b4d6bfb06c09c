package builtin

import (
	"context"
	"crypto/md5" //nolint:gosec // Glance's legacy checksum, where the operator allows it
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// glanceFirmwareDir is where firmware-flash puts a verified Glance image,
// relative to the kernel's firmware directory, so that devlink dev flash
// (which loads by name from there) can load it.
const glanceFirmwareDir = "scour-images"

// glanceFlashRef is firmware-flash's args.image when it names a Glance
// image ({glance_id: ...} or {glance_query: ...}); nil for a file name.
func glanceFlashRef(a map[string]any) (map[string]any, bool) {
	m, ok := a["image"].(map[string]any)
	return m, ok
}

func checkGlanceFlashRef(ref map[string]any) error {
	if ref["glance_id"] == nil && ref["glance_query"] == nil {
		return fmt.Errorf("image: a map must name a Glance image (glance_id: or glance_query:); a local image is a name under %s with sha256:", hardware.DefaultFirmwareDir)
	}
	for k := range ref {
		if k != "glance_id" && k != "glance_query" {
			return fmt.Errorf("image.%s: unknown (known: glance_id, glance_query)", k)
		}
	}
	return nil
}

// stageGlanceFirmware resolves a Glance image to verified bytes and puts
// them where the kernel loads firmware from, under a name made of the
// hash; then it hashes the file the kernel will load for that name and
// compares it with Glance's hash. It returns the name for devlink, the
// file checked and the image.
func stageGlanceFirmware(ctx context.Context, be hardware.Backend, t *Target, ref map[string]any) (string, string, *GoldenImage, error) {
	if t.Images == nil {
		return "", "", nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: image %v names Glance, but scourd has no image service configured", t.Step, ref)
	}
	img, err := t.Images.Resolve(ctx, ref)
	if err != nil {
		pe := *plugins.AsError(err)
		pe.Msg = fmt.Sprintf("step %s: firmware image %v for %s: %s", t.Step, ref, t.Device.Address, pe.Msg)
		return "", "", nil, &pe
	}
	if img.Release != nil {
		// The verified bytes are copied out of img.Path below; the file
		// the kernel loads is hashed again after that.
		defer img.Release()
	}
	v := img.HashValue
	if len(v) > 64 {
		v = v[:64]
	}
	name := glanceFirmwareDir + "/" + img.HashAlgo + "-" + v + ".bin"
	dst, err := firmwareFile(be, hardware.FirmwareImage{Path: name})
	if err != nil {
		return "", "", nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: firmware image for %s: %v", t.Step, t.Device.Address, err)
	}
	if sum, _ := fileHash(dst, img.HashAlgo); sum != img.HashValue {
		if err := copyVerified(img.Path, dst); err != nil {
			return "", "", nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: putting Glance image %s where the kernel loads firmware (%s) for %s: %v (scourd must be able to write %s)", t.Step, img.ID, dst, t.Device.Address, err, filepath.Dir(dst))
		}
	}
	sum, err := fileHash(dst, img.HashAlgo)
	if err != nil || sum != img.HashValue {
		return "", "", nil, &plugins.Error{Code: plugins.CodeInvalidConfig,
			Msg:     fmt.Sprintf("step %s: firmware file %s (Glance image %s) has %s %s, Glance says %s: refusing to flash %s (%v)", t.Step, dst, img.ID, img.HashAlgo, sum, img.HashValue, t.Device.Address, err),
			Details: map[string]any{"image": img.Map(), "image_file": dst}}
	}
	return name, dst, img, nil
}

// copyVerified copies src to dst through a temporary file in dst's
// directory, renamed into place.
func copyVerified(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".scour-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// fileHash hashes path with a hash Glance names.
func fileHash(path, algo string) (string, error) {
	var h hash.Hash
	switch algo {
	case "sha512":
		h = sha512.New()
	case "sha384":
		h = sha512.New384()
	case "sha256":
		h = sha256.New()
	case "sha224":
		h = sha256.New224()
	case "md5":
		h = md5.New() //nolint:gosec // see the import
	default:
		return "", fmt.Errorf("hash algorithm %q unknown", algo)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
