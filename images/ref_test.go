package images

import (
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		in   map[string]any
		want string // Ref.String(), or the error's text
		bad  bool
	}{
		{"file", map[string]any{"file": "/lib/firmware/x.bin", "sha256": sum}, "file /lib/firmware/x.bin", false},
		{"id", map[string]any{"glance_id": "5f0c"}, "glance image 5f0c", false},
		{"query", map[string]any{"glance_query": map[string]any{"properties": map[string]any{"scour_model": "n3000"}, "tags": []any{"golden"}}},
			"glance query {scour_model=n3000, tag:golden}", false},
		{"none", map[string]any{}, "exactly one of", true},
		{"two", map[string]any{"glance_id": "5f0c", "file": "/x", "sha256": sum}, "exactly one of", true},
		{"relative file", map[string]any{"file": "x.bin", "sha256": sum}, "absolute path", true},
		{"file without sum", map[string]any{"file": "/x.bin"}, "64 hex digits", true},
		{"sha256 with glance", map[string]any{"glance_id": "5f0c", "sha256": sum}, "only with file", true},
		{"empty query", map[string]any{"glance_query": map[string]any{}}, "empty", true},
		{"numeric property", map[string]any{"glance_query": map[string]any{"properties": map[string]any{"rev": 3}}}, "quote numbers", true},
		{"unknown query key", map[string]any{"glance_query": map[string]any{"name": "x"}}, "unknown", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseRef(tc.in)
			switch {
			case tc.bad && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ParseRef(%v) error %v, want one containing %q", tc.in, err, tc.want)
			case !tc.bad && err != nil:
				t.Fatalf("ParseRef(%v): %v", tc.in, err)
			case !tc.bad && r.String() != tc.want:
				t.Fatalf("ParseRef(%v) = %s, want %s", tc.in, r, tc.want)
			}
		})
	}
}
