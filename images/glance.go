package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	gimages "github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// Glance is the Source of Glance images: it finds the image (by id or by
// query), refuses one that is not active, has no usable hash or is larger
// than the cache, and returns the cached copy (re-hashed) or downloads it
// (GET /v2/images/{id}/file), hashing while streaming into the cache.
type Glance struct {
	client func(ctx context.Context) (*gophercloud.ServiceClient, error)
	cache  *Cache
	cfg    GlanceConfig
	m      *Metrics
	log    *slog.Logger
}

// NewGlance makes a Glance source. client returns the image service
// client (authenticated on first use: see app's wiring); m may be nil.
func NewGlance(client func(ctx context.Context) (*gophercloud.ServiceClient, error), cache *Cache, cfg GlanceConfig, m *Metrics, log *slog.Logger) *Glance {
	cfg2 := Config{Glance: cfg}
	cfg2.SetDefaults()
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Glance{client: client, cache: cache, cfg: cfg2.Glance, m: m, log: log}
}

var _ Source = (*Glance)(nil)

// Fetch resolves ref to verified bytes (see the package doc).
func (g *Glance) Fetch(ctx context.Context, ref Ref) (Image, error) {
	img, err := g.fetch(ctx, ref)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Ref: ref, Reason: ReasonUnavailable, Msg: "Glance could not be read; the device stays reserved and the run is tried again later", Err: err}
			err = e
		}
		g.m.refused.WithLabelValues(string(e.Reason)).Inc()
		g.log.Warn("image refused: nothing is programmed", "image", ref.String(), "image_id", e.ImageID, "reason", e.Reason, "error", err)
	}
	return img, err
}

func (g *Glance) fetch(ctx context.Context, ref Ref) (Image, error) {
	if err := ref.Validate(); err != nil || !ref.IsGlance() {
		return Image{}, &Error{Ref: ref, Reason: ReasonInvalid, Msg: "not a Glance image reference; fix the step's image argument", Err: err}
	}
	sc, err := g.client(ctx)
	if err != nil {
		return Image{}, &Error{Ref: ref, Reason: ReasonUnavailable, Msg: "no client for Glance (check images.glance.endpoint and placement's credentials)", Err: err}
	}
	meta, err := g.find(ctx, sc, ref)
	if err != nil {
		return Image{}, err
	}
	img, err := g.check(ref, meta)
	if err != nil {
		return Image{}, err
	}
	unlock := g.cache.lock(img.HashAlgo, img.HashValue)
	defer unlock()
	p, ok, err := g.cache.get(img.HashAlgo, img.HashValue, img.Size)
	if err != nil {
		g.m.fetches.WithLabelValues("cache_corrupt").Inc()
		g.log.Warn("image cache entry corrupted: fetching it again", "image_id", img.ID, "error", err)
	}
	if ok {
		g.m.fetches.WithLabelValues("cache_hit").Inc()
		img.Path, img.Cached = p, true
		return img, nil
	}
	img.Path, err = g.download(ctx, sc, ref, img)
	if err != nil {
		return Image{}, err
	}
	g.m.fetches.WithLabelValues("download").Inc()
	return img, nil
}

// check turns Glance's image into what will be verified, or refuses it.
func (g *Glance) check(ref Ref, m *gimages.Image) (Image, error) {
	refuse := func(r Reason, f string, a ...any) (Image, error) {
		return Image{}, &Error{Ref: ref, Reason: r, ImageID: m.ID, Msg: fmt.Sprintf(f, a...)}
	}
	if m.Status != gimages.ImageStatusActive {
		return refuse(ReasonNotActive, "Glance image %s (%s) is %s, not active: refusing it (reactivate it, or point the step at an active image)", m.ID, m.Name, m.Status)
	}
	img := Image{ID: m.ID, Name: m.Name, Size: m.SizeBytes, Source: "glance", Properties: stringProps(m.Properties)}
	algo, _ := m.Properties["os_hash_algo"].(string)
	val, _ := m.Properties["os_hash_value"].(string)
	switch {
	case algo != "" && val != "":
		img.HashAlgo, img.HashValue = algo, strings.ToLower(val)
	case g.cfg.AllowMD5 && m.Checksum != "":
		img.HashAlgo, img.HashValue = "md5", strings.ToLower(m.Checksum)
	case m.Checksum != "":
		return refuse(ReasonNoMultihash, "Glance image %s (%s) has no multihash (os_hash_algo/os_hash_value), only the legacy md5 checksum: refusing it (re-upload it to a Glance that computes multihash, or set images.glance.allow_md5: true to accept md5)", m.ID, m.Name)
	default:
		return refuse(ReasonNoMultihash, "Glance image %s (%s) has no hash at all (no os_hash_value, no checksum): refusing it (re-upload it)", m.ID, m.Name)
	}
	if _, err := newHash(img.HashAlgo); err != nil {
		return refuse(ReasonNoMultihash, "Glance image %s (%s): %v: refusing it", m.ID, m.Name, err)
	}
	img.Checked = img.HashAlgo
	if img.Size <= 0 {
		return refuse(ReasonSizeMismatch, "Glance image %s (%s) says it holds %d bytes: refusing it (re-upload it)", m.ID, m.Name, img.Size)
	}
	if img.Size > g.cache.Max() {
		return refuse(ReasonTooLarge, "Glance image %s (%s) is %d bytes, more than the image cache holds (images.cache_max_bytes %d): raise cache_max_bytes", m.ID, m.Name, img.Size, g.cache.Max())
	}
	return img, nil
}

func stringProps(p map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// find reads the image by id, or the one active image the query matches.
func (g *Glance) find(ctx context.Context, sc *gophercloud.ServiceClient, ref Ref) (*gimages.Image, error) {
	if ref.ID != "" {
		var m *gimages.Image
		err := g.retry(ctx, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, g.cfg.RequestTimeout)
			defer cancel()
			var err error
			m, err = gimages.Get(ctx, sc, ref.ID).Extract()
			return err
		})
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return nil, &Error{Ref: ref, Reason: ReasonNotFound, ImageID: ref.ID, Msg: "Glance has no image with this id (deleted?): upload it again and point the step at the new id", Err: err}
		}
		return m, err
	}
	var all []gimages.Image
	err := g.retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.RequestTimeout)
		defer cancel()
		all = nil
		return gimages.List(sc, query{ref.Query}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			is, err := gimages.ExtractImages(p)
			all = append(all, is...)
			return true, err
		})
	})
	if err != nil {
		return nil, err
	}
	var active []gimages.Image
	var names []string
	for _, m := range all {
		if !matches(m, ref.Query) { // Glance ignoring a filter must not widen the match
			continue
		}
		names = append(names, fmt.Sprintf("%s (%s, %s)", m.ID, m.Name, m.Status))
		if m.Status == gimages.ImageStatusActive {
			active = append(active, m)
		}
	}
	switch len(active) {
	case 1:
		return &active[0], nil
	case 0:
		return nil, &Error{Ref: ref, Reason: ReasonNotFound, Candidates: names,
			Msg: fmt.Sprintf("no active Glance image matches (non-active matches: %v): upload the image with these properties and tags, or reactivate it", orNone(names))}
	}
	return nil, &Error{Ref: ref, Reason: ReasonAmbiguous, Candidates: names,
		Msg: fmt.Sprintf("%d active Glance images match, want exactly one: %s; deactivate or retag all but one, or name the image by glance_id", len(active), strings.Join(names, ", "))}
}

func orNone(s []string) any {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// matches checks a listed image against the query itself.
func matches(m gimages.Image, q *Query) bool {
	for k, v := range q.Properties {
		if s, ok := m.Properties[k].(string); !ok || s != v {
			return false
		}
	}
	for _, t := range q.Tags {
		if !slices.Contains(m.Tags, t) {
			return false
		}
	}
	return true
}

// query is a Glance list query: custom properties filter by exact value
// (?prop=value), tags by repeated ?tag=; every status is listed so a
// deactivated match can be named.
type query struct{ q *Query }

func (q query) ToImageListQuery() (string, error) {
	v := url.Values{}
	for k, val := range q.q.Properties {
		v.Set(k, val)
	}
	for _, t := range q.q.Tags {
		v.Add("tag", t)
	}
	v.Set("limit", "100")
	return "?" + v.Encode(), nil
}

// stalled is a download that received nothing for StallTimeout.
var errStalled = errors.New("download stalled")

// copyTo reads from r into w, but abandons the read when nothing arrives
// for the stall timeout.
func (g *Glance) copyTo(ctx context.Context, cancel context.CancelCauseFunc, w io.Writer, r io.Reader) (int64, error) {
	progress := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	go func() { // owner: this call; ends with done
		t := newTimer(g.cfg.StallTimeout)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-progress:
				t.Reset(g.cfg.StallTimeout)
			case <-t.C:
				cancel(fmt.Errorf("%w: no byte for %s (images.glance.stall_timeout)", errStalled, g.cfg.StallTimeout))
				return
			}
		}
	}()
	n, err := io.Copy(w, progressReader{r, progress})
	if err != nil && context.Cause(ctx) != nil {
		err = context.Cause(ctx)
	}
	return n, err
}

type progressReader struct {
	r io.Reader
	p chan<- struct{}
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		select {
		case p.p <- struct{}{}:
		default:
		}
	}
	return n, err
}

// EndpointClient is an image service client for a fixed Glance URL
// (images.glance.endpoint), sending token when not empty (an
// unauthenticated Glance ignores it).
func EndpointClient(endpoint, token string, hc http.Client) *gophercloud.ServiceClient {
	pc := &gophercloud.ProviderClient{HTTPClient: hc}
	if token != "" {
		pc.SetToken(token)
	}
	u := strings.TrimRight(endpoint, "/") + "/"
	return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: u, ResourceBase: u + "v2/", Type: "image"}
}

// StaticClient is a client func for NewGlance that always returns sc.
func StaticClient(sc *gophercloud.ServiceClient) func(context.Context) (*gophercloud.ServiceClient, error) {
	return func(context.Context) (*gophercloud.ServiceClient, error) { return sc, nil }
}
