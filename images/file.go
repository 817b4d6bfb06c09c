package images

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/scour-project/scour/plugins/builtin"
)

// Files is the Source of local files: each is read once per Fetch,
// hashed while it is copied into a private directory
// (builtin.PrivateCopy), and must match its Ref's SHA256. Image.Path is
// that copy, so the bytes used are the bytes verified even when the file
// changes after the check; Image.Release deletes it.
type Files struct{}

var _ Source = Files{}

// Fetch copies ref.File privately, hashing it, and compares the hash with
// ref.SHA256.
func (Files) Fetch(ctx context.Context, ref Ref) (Image, error) {
	if ref.File == "" {
		return Image{}, &Error{Ref: ref, Reason: ReasonInvalid, Msg: "not a local file reference"}
	}
	if err := ref.Validate(); err != nil {
		return Image{}, &Error{Ref: ref, Reason: ReasonInvalid, Msg: "fix the step's image argument", Err: err}
	}
	cp, err := builtin.PrivateCopy(ctx, ref.File)
	if errors.Is(err, builtin.ErrNoSpace) {
		return Image{}, &Error{Ref: ref, Reason: ReasonUnavailable, Msg: "no space for its private copy; the device stays reserved and the run is tried again later", Err: err}
	}
	if err != nil {
		return Image{}, &Error{Ref: ref, Reason: ReasonNotFound, Msg: "cannot read the file; put the image there or fix image.file", Err: err}
	}
	if !strings.EqualFold(cp.SHA256, ref.SHA256) {
		cp.Remove()
		return Image{}, &Error{Ref: ref, Reason: ReasonHashMismatch,
			Msg: fmt.Sprintf("has sha256 %s, config says %s: refusing it (fix the file or image.sha256)", cp.SHA256, strings.ToLower(ref.SHA256))}
	}
	return Image{Path: cp.Path, Name: filepath.Base(ref.File), HashAlgo: "sha256", HashValue: cp.SHA256, Size: cp.Size,
		Source: "file", Checked: "sha256", Properties: map[string]string{}, Release: cp.Remove}, nil
}
