package images

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Ref names an image. Exactly one of File, ID and Query is set.
type Ref struct {
	// File is a local file (absolute path), checked against SHA256.
	File   string
	SHA256 string
	// ID is a Glance image id.
	ID string
	// Query selects the one active Glance image with all these
	// properties and tags.
	Query *Query
}

// Query selects Glance images: every property must have exactly the
// given value and every tag must be present.
type Query struct {
	Properties map[string]string
	Tags       []string
}

// IsGlance reports whether the image comes from Glance.
func (r Ref) IsGlance() bool { return r.File == "" }

// String names the reference for messages: "file /x", "glance id X",
// "glance query properties {k=v} tags [t]".
func (r Ref) String() string {
	switch {
	case r.File != "":
		return "file " + r.File
	case r.ID != "":
		return "glance image " + r.ID
	case r.Query != nil:
		return "glance query " + r.Query.String()
	}
	return "no image"
}

func (q *Query) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(q.Properties)) {
		parts = append(parts, k+"="+q.Properties[k])
	}
	for _, t := range q.Tags {
		parts = append(parts, "tag:"+t)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// ParseRef reads a step's image argument as YAML gives it:
//
//	image: {file: /lib/firmware/x.bin, sha256: <64 hex>}
//	image: {glance_id: 5f0c...}
//	image: {glance_query: {properties: {scour_model: n3000}, tags: [golden]}}
//
// Keys it does not know are left to the caller (a step's own, such as
// bitstream_id); every problem is reported at once.
func ParseRef(m map[string]any) (Ref, error) {
	var r Ref
	var errs []error
	str := func(k string) string {
		v, ok := m[k]
		if !ok || v == nil {
			return ""
		}
		s, ok := v.(string)
		if !ok || s == "" {
			errs = append(errs, fmt.Errorf("image.%s: want a non-empty string, got %v (%T)", k, v, v))
		}
		return s
	}
	r.File, r.SHA256, r.ID = str("file"), str("sha256"), str("glance_id")
	if q, ok := m["glance_query"]; ok && q != nil {
		var err error
		r.Query, err = parseQuery(q)
		errs = append(errs, err)
	}
	errs = append(errs, r.Validate())
	return r, errors.Join(errs...)
}

func parseQuery(v any) (*Query, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("image.glance_query: want a map with properties: and/or tags:, got %v (%T)", v, v)
	}
	q := &Query{Properties: map[string]string{}}
	var errs []error
	for k, v := range m {
		switch k {
		case "properties":
			pm, ok := v.(map[string]any)
			if !ok {
				errs = append(errs, fmt.Errorf("image.glance_query.properties: want a map of property: value, got %T", v))
				continue
			}
			for pk, pv := range pm {
				s, ok := pv.(string)
				if !ok {
					errs = append(errs, fmt.Errorf("image.glance_query.properties.%s: want a string (quote numbers), got %v (%T)", pk, pv, pv))
				}
				q.Properties[pk] = s
			}
		case "tags":
			tl, ok := v.([]any)
			if !ok {
				errs = append(errs, fmt.Errorf("image.glance_query.tags: want a list of strings, got %T", v))
				continue
			}
			for _, t := range tl {
				s, ok := t.(string)
				if !ok || s == "" {
					errs = append(errs, fmt.Errorf("image.glance_query.tags: %v (%T) is not a non-empty string", t, t))
				}
				q.Tags = append(q.Tags, s)
			}
		default:
			errs = append(errs, fmt.Errorf("image.glance_query.%s: unknown (known: properties, tags)", k))
		}
	}
	return q, errors.Join(errs...)
}

// Validate checks that exactly one source is named, and its form.
func (r Ref) Validate() error {
	n := 0
	for _, set := range []bool{r.File != "", r.ID != "", r.Query != nil} {
		if set {
			n++
		}
	}
	var errs []error
	if n != 1 {
		errs = append(errs, errors.New("image: give exactly one of file: (with sha256:), glance_id: or glance_query:"))
	}
	if r.File != "" {
		if !strings.HasPrefix(r.File, "/") {
			errs = append(errs, fmt.Errorf("image.file %q: want an absolute path", r.File))
		}
		if !isHex(r.SHA256, 64) {
			errs = append(errs, fmt.Errorf("image.sha256: %q is not 64 hex digits (a local file is checked against it before use)", r.SHA256))
		}
	} else if r.SHA256 != "" {
		errs = append(errs, errors.New("image.sha256: only with file: (Glance images are checked against Glance's own hash)"))
	}
	if q := r.Query; q != nil && len(q.Properties) == 0 && len(q.Tags) == 0 {
		errs = append(errs, errors.New("image.glance_query: empty; give properties: and/or tags: that select exactly one image"))
	}
	return errors.Join(errs...)
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range strings.ToLower(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
