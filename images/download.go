package images

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/sethvargo/go-retry"
)

// download streams the image's data into the cache, hashing as it goes,
// and keeps it only when the size and hash match what Glance vouched
// for. Network errors, 5xx and stalls are retried (bounded); a mismatch
// is not: the same bytes would come back.
func (g *Glance) download(ctx context.Context, sc *gophercloud.ServiceClient, ref Ref, img Image) (string, error) {
	var path string
	err := g.retry(ctx, func(ctx context.Context) error {
		var err error
		path, err = g.downloadOnce(ctx, sc, ref, img)
		return err
	})
	return path, forbidden(ref, img.ID, "download_image", err)
}

func (g *Glance) downloadOnce(ctx context.Context, sc *gophercloud.ServiceClient, ref Ref, img Image) (string, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	res := imagedata.Download(ctx, sc, img.ID)
	if res.Err != nil {
		return "", res.Err
	}
	body := res.Body
	defer body.Close()
	h, _ := newHash(img.HashAlgo) // check() accepted the algorithm
	var n int64
	fill := func(w io.Writer) error {
		var err error
		n, err = g.copyTo(ctx, cancel, w, h, body)
		g.m.bytes.Add(float64(n))
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// The connection closed before the length Glance announced: a
			// network failure (retried, then "unavailable"), not an image
			// of the wrong size.
			err = fmt.Errorf("the download of Glance image %s (%s) was cut off after %d of its %d bytes (the connection closed early): %w", img.ID, img.Name, n, img.Size, err)
		}
		return err
	}
	verify := func() error {
		if n != img.Size {
			return &Error{Ref: ref, Reason: ReasonSizeMismatch, ImageID: img.ID,
				Msg: fmt.Sprintf("Glance image %s (%s) sent %d bytes, its size is %d: refusing it (the stored data is damaged or was replaced: re-upload the image)", img.ID, img.Name, n, img.Size)}
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != img.HashValue {
			return &Error{Ref: ref, Reason: ReasonHashMismatch, ImageID: img.ID,
				Msg: fmt.Sprintf("Glance image %s (%s): hash mismatch: the downloaded bytes have %s %s, Glance says %s: refusing it, nothing is programmed (the stored data was changed behind Glance's back: re-upload the golden image)", img.ID, img.Name, img.HashAlgo, got, img.HashValue)}
		}
		return nil
	}
	return g.cache.put(img.HashAlgo, img.HashValue, fill, verify)
}

// retry runs f up to Attempts times while it fails in a way a later try
// may not (unreachable, 5xx, 429, a stall); other errors end it at once.
func (g *Glance) retry(ctx context.Context, f func(ctx context.Context) error) error {
	b := retry.WithMaxRetries(uint64(g.cfg.Attempts-1), retry.NewExponential(g.cfg.Backoff))
	return retry.Do(ctx, b, func(ctx context.Context) error {
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := f(rctx)
		if err != nil && transient(ctx, err) {
			return retry.RetryableError(err)
		}
		return err
	})
}

// transient: a try later may succeed.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false // the caller gave up
	}
	var e *Error
	if errors.As(err, &e) {
		return false
	}
	var code gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &code) {
		return code.Actual >= 500 || code.Actual == http.StatusTooManyRequests
	}
	return true // network errors, stalls, truncated bodies
}
