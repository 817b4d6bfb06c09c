package images

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

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
	if why := transportRisk(sc, g.cfg.Endpoint == ""); why != "" {
		if !g.cfg.AllowInsecureImages {
			return Image{}, &Error{Ref: ref, Reason: ReasonInsecure,
				Msg: fmt.Sprintf("%s: whoever can change that connection can replace the image and the hash scour checks it against together, so no Glance image is taken over it and nothing is programmed (reach Glance, and Keystone when the catalog names Glance, over https with certificate verification; or set %s: true to accept the risk)", why, AllowInsecureKey)}
		}
		g.log.Warn("Glance image fetched over an insecure connection: its hash check proves nothing against whoever can change the connection", "image", ref.String(), "why", why, "allowed_by", AllowInsecureKey)
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
	// Pinned before it is checked or written, until the caller releases
	// the image: no other fetch evicts it in between.
	unpin := g.cache.pin(img.HashAlgo, img.HashValue)
	p, ok, err := g.cache.get(img.HashAlgo, img.HashValue, img.Size)
	if err != nil {
		g.m.fetches.WithLabelValues("cache_corrupt").Inc()
		g.log.Warn("image cache entry corrupted: fetching it again", "image_id", img.ID, "error", err)
	}
	if ok {
		g.m.fetches.WithLabelValues("cache_hit").Inc()
		img.Path, img.Cached, img.Release = p, true, unpin
		return img, nil
	}
	img.Path, err = g.download(ctx, sc, ref, img)
	if err != nil {
		unpin()
		return Image{}, err
	}
	g.m.fetches.WithLabelValues("download").Inc()
	img.Release = unpin
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
	case algo == "md5" && val != "" && !g.cfg.AllowMD5:
		return refuse(ReasonNoMultihash, "Glance image %s (%s) has only an md5 multihash (os_hash_algo md5): refusing it (re-upload it to a Glance hashing with sha512, or set images.glance.allow_md5: true to accept md5)", m.ID, m.Name)
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
	if err := checkHashValue(img.HashAlgo, img.HashValue); err != nil {
		return refuse(ReasonNoMultihash, "Glance image %s (%s): %v: refusing it, nothing is downloaded or programmed (its record in Glance is damaged or not Glance's: re-upload the image)", m.ID, m.Name, err)
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

// find reads the image by id, or the one active image the query matches,
// among the images of the trusted projects (images.glance.owners) only.
func (g *Glance) find(ctx context.Context, sc *gophercloud.ServiceClient, ref Ref) (*gimages.Image, error) {
	if len(g.cfg.Owners) == 0 {
		return nil, &Error{Ref: ref, Reason: ReasonInvalid, ImageID: ref.ID,
			Msg: fmt.Sprintf("%s is empty, so scour trusts no Glance project's images: list the project ids that own the golden images", OwnersKey)}
	}
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
			return nil, &Error{Ref: ref, Reason: ReasonNotFound, ImageID: ref.ID, Msg: "Glance has no image with this id (deleted?), or none scour's project may see (a private image of another project: share it with scour's project, docs/images.md): upload it again and point the step at the new id", Err: err}
		}
		if err != nil {
			return nil, forbidden(ref, ref.ID, "get_image", err)
		}
		if !g.cfg.trusted(m.Owner) {
			return nil, &Error{Ref: ref, Reason: ReasonUntrustedOwner, ImageID: m.ID,
				Msg: fmt.Sprintf("Glance image %s (%s) belongs to project %q, which is not in %s %v: refusing it (point the step at an image of a trusted project, or add its owner to %s if that project holds golden images)", m.ID, m.Name, m.Owner, OwnersKey, g.cfg.Owners, OwnersKey)}
		}
		return m, err
	}
	var all []gimages.Image
	for _, owner := range g.cfg.Owners {
		is, err := g.list(ctx, sc, query{ref.Query, owner})
		if err != nil {
			return nil, forbidden(ref, "", "get_images", err)
		}
		all = append(all, is...)
	}
	var active []gimages.Image
	var names []string
	seen := map[string]bool{}
	for _, m := range all {
		// Glance ignoring a filter (owner included) must not widen the match.
		if seen[m.ID] || !matches(m, ref.Query) || !g.cfg.trusted(m.Owner) {
			continue
		}
		seen[m.ID] = true
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
			Msg: fmt.Sprintf("no active Glance image matches among the trusted projects' (%s %v; non-active matches: %v%s): upload the image with these properties and tags to a trusted project, or reactivate it", OwnersKey, g.cfg.Owners, orNone(names), g.untrusted(ctx, sc, ref))}
	}
	return nil, &Error{Ref: ref, Reason: ReasonAmbiguous, Candidates: names,
		Msg: fmt.Sprintf("%d active Glance images of the trusted projects match, want exactly one: %s; deactivate or retag all but one, or name the image by glance_id", len(active), strings.Join(names, ", "))}
}

// forbidden turns Glance's 403 to a request needing policy rule into a
// refusal naming the rule and the role Glance's default policy wants for
// it; any other error is returned as it is.
func forbidden(ref Ref, imageID, rule string, err error) error {
	if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		return err
	}
	role := "reader"
	if rule == "download_image" {
		role = "member"
	}
	return &Error{Ref: ref, Reason: ReasonForbidden, ImageID: imageID, Err: err,
		Msg: fmt.Sprintf("Glance's policy refused scour the %s permission (HTTP 403): give scour's Keystone user the %s role on the project it authenticates to (Glance's secure-RBAC default for %s), or allow it in Glance's policy.yaml; nothing is programmed and the device stays reserved (docs/images.md, Keystone)", rule, role, rule)}
}

// list reads every page of a list query.
func (g *Glance) list(ctx context.Context, sc *gophercloud.ServiceClient, q query) ([]gimages.Image, error) {
	var all []gimages.Image
	err := g.retry(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.RequestTimeout)
		defer cancel()
		all = nil
		return gimages.List(sc, q).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			is, err := gimages.ExtractImages(p)
			all = append(all, is...)
			return true, err
		})
	})
	return all, err
}

// untrusted names, for the message of a query nothing trusted matched,
// the matching images of other projects, which were ignored (best
// effort: "" when there are none or Glance cannot say). They are never
// candidates.
func (g *Glance) untrusted(ctx context.Context, sc *gophercloud.ServiceClient, ref Ref) string {
	all, err := g.list(ctx, sc, query{q: ref.Query})
	if err != nil {
		return ""
	}
	var names []string
	for _, m := range all {
		if matches(m, ref.Query) && !g.cfg.trusted(m.Owner) {
			names = append(names, fmt.Sprintf("%s (%s, %s, owner %s)", m.ID, m.Name, m.Status, m.Owner))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("; ignored because their owner is not in %s: %s", OwnersKey, strings.Join(names, ", "))
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
// (?prop=value), tags by repeated ?tag=, the owning project by ?owner=
// (when set); every status is listed so a deactivated match can be named.
type query struct {
	q     *Query
	owner string
}

func (q query) ToImageListQuery() (string, error) {
	v := url.Values{}
	for k, val := range q.q.Properties {
		v.Set(k, val)
	}
	for _, t := range q.q.Tags {
		v.Add("tag", t)
	}
	if q.owner != "" {
		v.Set("owner", q.owner)
	}
	v.Set("limit", "100")
	return "?" + v.Encode(), nil
}

// errStalled is a download that received nothing for StallTimeout.
var errStalled = errors.New("download stalled")

// copyBuf is the size of one read; copyBufs are in flight between the
// reading goroutine and the hashing one.
const (
	copyBuf  = 1 << 20
	copyBufs = 4
)

// copyTo reads r into the cache file w and the hash h: the read, the
// hashing and the write each on a goroutine of their own (curl |
// sha512sum runs the first two so), 1 MiB at a time. It abandons the read
// when nothing arrives for the stall timeout.
func (g *Glance) copyTo(ctx context.Context, cancel context.CancelCauseFunc, w io.Writer, h hash.Hash, r io.Reader) (int64, error) {
	type chunk struct {
		b   []byte
		err error
	}
	free := make(chan []byte, copyBufs)
	for range copyBufs {
		free <- make([]byte, copyBuf)
	}
	full := make(chan chunk, copyBufs)
	done := make(chan struct{})
	defer close(done)
	go func() { // owner: this call; ends at EOF, on an error, or with done
		defer close(full)
		stall := time.AfterFunc(g.cfg.StallTimeout, func() {
			cancel(fmt.Errorf("%w: no byte for %s (images.glance.stall_timeout)", errStalled, g.cfg.StallTimeout))
		})
		defer stall.Stop()
		for {
			var b []byte
			select {
			case b = <-free:
			case <-done:
				return
			}
			n, err := fill(r, b)
			if n > 0 {
				stall.Reset(g.cfg.StallTimeout)
			}
			select {
			case full <- chunk{b[:n], err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// The hasher takes each chunk while this goroutine writes it.
	toHash, hashed := make(chan []byte), make(chan struct{})
	go func() { // owner: this call; ends when toHash is closed
		for b := range toHash {
			h.Write(b)
			hashed <- struct{}{}
		}
	}()
	defer close(toHash)
	var total int64
	for c := range full {
		if len(c.b) > 0 {
			toHash <- c.b
			_, err := w.Write(c.b)
			<-hashed
			if err != nil {
				return total, err
			}
			total += int64(len(c.b))
		}
		free <- c.b[:cap(c.b)]
		if c.err == io.EOF {
			return total, nil
		}
		if c.err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return total, cause
			}
			return total, c.err
		}
	}
	return total, nil
}

// fill reads r into b until b is full or r fails, returning r's own
// error: io.EOF at the end of the body, and io.ErrUnexpectedEOF (a body
// cut off before the length the server announced) as such. io.ReadFull
// would turn a short last read into io.ErrUnexpectedEOF too, and telling
// the two apart is the point: a cut is a network failure, retried, not
// an image of the wrong size.
func fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := r.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
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
