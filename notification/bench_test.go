package notification

import (
	"testing"
)

// BenchmarkDecodeDispatch measures the pure in-process cost of one relevant
// notification (decode both JSON levels + payload, build the command) and of
// one ignored notification (payload skipped), for comparison.
func BenchmarkDecodeDispatch(b *testing.B) {
	for _, bc := range []struct{ name, file string }{
		{"relevant-versioned", "testdata/versioned/instance-delete-end.json"},
		{"relevant-legacy", "testdata/legacy/compute.instance.delete.end.json"},
		{"ignored-versioned", "testdata/versioned/instance-update.json"},
	} {
		body := wireMessage(b, bc.file)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := Decode(body)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Dispatch(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
