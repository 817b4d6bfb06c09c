package harness

import (
	"testing"
)

// Expected values are CPython 3.11's json.dumps output for the same input.
func TestPyDumps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string // JSON input, parsed keeping order
		want string
	}{
		{"latin1 escaped", `"héllo"`, `"h\u00e9llo"`},
		{"line separator escaped", "\"a\u2028b\"", `"a\u2028b"`},
		{"astral plane as surrogate pair", `"😀"`, `"\ud83d\ude00"`},
		{"short escapes", `"tab\there\n"`, `"tab\there\n"`},
		{"no HTML escaping", `"<>&/"`, `"<>&/"`},
		{"control and DEL as \\u", `"\u007f\u0000\u001f"`, `"\u007f\u0000\u001f"`},
		{"backslash and quote", `"\\\""`, `"\\\""`},
		{"key order kept, python separators", `{"b":1,"a":[1.0,null,true,false]}`, `{"b": 1, "a": [1.0, null, true, false]}`},
		{"empty containers", `{"x":{},"y":[]}`, `{"x": {}, "y": []}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := ParseOrdered([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			got, err := PyDumps(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("PyDumps(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}
