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

// Resolve fetches the image ref names. Every failure is plugins code 3, a
// configuration or deployment problem and not the device's: the run ends
// "retry later", the device stays reserved and is tried again at the next
// scan, without using up its pipeline's max_runs. That holds for Glance
// being unavailable too (the images package already retried, bounded): an
// outage of the image service must not quarantine every dirty device that
// needs an image, as code 11 would once max_runs ran out. Nothing is
// programmed: the step gets no image.
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
		Size: img.Size, Path: img.Path, Source: img.Source, Properties: img.Properties, Release: img.Release}, nil
}

func stepError(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return plugins.Errorf(plugins.CodeInvalidConfig, "%v (nothing programmed; the device stays reserved)", err)
	}
	details := map[string]any{"image_refused": string(e.Reason), "image_ref": e.Ref.String()}
	if e.ImageID != "" {
		details["image_id"] = e.ImageID
	}
	if len(e.Candidates) > 0 {
		details["candidates"] = e.Candidates
	}
	what := "nothing programmed; the device stays reserved"
	if e.Recoverable() {
		what = "Glance unavailable: " + what + " and the run is tried again later"
	}
	return &plugins.Error{Code: plugins.CodeInvalidConfig, Msg: fmt.Sprintf("%v (%s)", err, what), Details: details}
}
