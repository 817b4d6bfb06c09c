package images

import (
	"context"
	"errors"
	"fmt"

	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/plugins/builtin"
)

// Steps adapts a Source to the steps' builtin.ImageResolver (the engine's
// Options.Images): the step's args.image map in, a GoldenImage out.
type Steps struct{ Source Source }

var _ builtin.ImageResolver = Steps{}

// Resolve fetches the image ref names. A refused image is the step's
// configuration problem (plugins code 3: the device stays reserved and is
// retried, never quarantined for it); Glance unavailable is code 11 (tried
// again). Either way nothing is programmed: the step gets no image.
func (s Steps) Resolve(ctx context.Context, ref map[string]any) (*builtin.GoldenImage, error) {
	rf, err := ParseRef(ref)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	img, err := s.Source.Fetch(ctx, rf)
	if err != nil {
		return nil, stepError(err)
	}
	return &builtin.GoldenImage{ID: img.ID, Name: img.Name, HashAlgo: img.HashAlgo, HashValue: img.HashValue,
		Size: img.Size, Path: img.Path, Source: img.Source, Properties: img.Properties}, nil
}

func stepError(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return plugins.Errorf(plugins.CodeTryAgainLater, "%v", err)
	}
	code := plugins.CodeInvalidConfig
	if e.Recoverable() {
		code = plugins.CodeTryAgainLater
	}
	details := map[string]any{"image_refused": string(e.Reason), "image_ref": e.Ref.String()}
	if e.ImageID != "" {
		details["image_id"] = e.ImageID
	}
	if len(e.Candidates) > 0 {
		details["candidates"] = e.Candidates
	}
	return &plugins.Error{Code: code, Msg: fmt.Sprintf("%v (nothing programmed; the device stays reserved)", err), Details: details}
}
