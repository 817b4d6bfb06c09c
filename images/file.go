package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Files is the Source of local files: each is hashed on every Fetch and
// must match its Ref's SHA256.
type Files struct{}

var _ Source = Files{}

// Fetch hashes ref.File and compares it with ref.SHA256.
func (Files) Fetch(ctx context.Context, ref Ref) (Image, error) {
	if ref.File == "" {
		return Image{}, &Error{Ref: ref, Reason: ReasonInvalid, Msg: "not a local file reference"}
	}
	if err := ref.Validate(); err != nil {
		return Image{}, &Error{Ref: ref, Reason: ReasonInvalid, Msg: "fix the step's image argument", Err: err}
	}
	f, err := os.Open(ref.File)
	if err != nil {
		return Image{}, &Error{Ref: ref, Reason: ReasonNotFound, Msg: "cannot read the file; put the image there or fix image.file", Err: err}
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return Image{}, &Error{Ref: ref, Reason: ReasonNotFound, Msg: "reading the file", Err: err}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if !strings.EqualFold(sum, ref.SHA256) {
		return Image{}, &Error{Ref: ref, Reason: ReasonHashMismatch,
			Msg: fmt.Sprintf("has sha256 %s, config says %s: refusing it (fix the file or image.sha256)", sum, strings.ToLower(ref.SHA256))}
	}
	return Image{Path: ref.File, Name: filepath.Base(ref.File), HashAlgo: "sha256", HashValue: sum, Size: n,
		Source: "file", Checked: "sha256", Properties: map[string]string{}}, nil
}

// ctxReader stops a long read when ctx ends.
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
