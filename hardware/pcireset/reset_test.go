package pcireset_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/scour-project/scour/hardware/pcireset"
)

// fakeTree lays out devices in the kernel's layout: each path is the
// device's place under devices/ ("pci0000:40/0000:40:01.1/0000:41:00.0"),
// linked from bus/pci/devices/<addr>, with reset and reset_method files.
func fakeTree(t *testing.T, methods string, paths ...string) pcireset.Sysfs {
	t.Helper()
	root := t.TempDir()
	for _, p := range paths {
		dir := filepath.Join(root, "devices", p)
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "reset"), nil, 0o200))
		must(t, os.WriteFile(filepath.Join(dir, "reset_method"), []byte(methods+"\n"), 0o644))
		link := filepath.Join(root, "bus/pci/devices", filepath.Base(p))
		must(t, os.MkdirAll(filepath.Dir(link), 0o755))
		must(t, os.Symlink(filepath.Join("../../../devices", p), link))
	}
	return pcireset.Sysfs(root)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const gpu = "0000:41:00.0"

func read(t *testing.T, s pcireset.Sysfs, f string) string {
	b, err := os.ReadFile(filepath.Join(string(s), "bus/pci/devices", gpu, f))
	must(t, err)
	return strings.TrimSpace(string(b))
}

func TestResetEscalation(t *testing.T) {
	t.Parallel()
	alone := "pci0000:40/0000:40:01.1/" + gpu
	for _, tc := range []struct {
		name     string
		methods  string   // the device's reset_method
		paths    []string // the tree
		want     []pcireset.Attempt
		reset    bool
		errMatch string
	}{
		{name: "flr works", methods: "flr bus", paths: []string{alone},
			want: []pcireset.Attempt{{Method: "flr"}}, reset: true},
		{name: "no flr: bus reset of a device alone behind its bridge", methods: "pm bus", paths: []string{alone},
			want: []pcireset.Attempt{{Method: "flr", Error: "flr is not among the device's reset methods [pm bus]"}, {Method: "bus"}}, reset: true},
		{name: "bus reset refused with a sibling function", methods: "pm bus",
			paths: []string{alone, "pci0000:40/0000:40:01.1/0000:41:00.1"},
			want: []pcireset.Attempt{{Method: "flr", Error: "flr is not among the device's reset methods [pm bus]"},
				{Method: "bus", Error: "secondary bus reset refused: the upstream bridge also has [0000:41:00.1] behind it, which the reset would hit"}},
			errMatch: "every method failed or was refused"},
		{name: "bus reset refused on a root bus", methods: "bus", paths: []string{"pci0000:40/" + gpu},
			want:     []pcireset.Attempt{{Method: "flr", Error: "flr is not among the device's reset methods [bus]"}, {Method: "bus", Error: "secondary bus reset refused: 0000:41:00.0 sits on root bus pci0000:40, there is no bridge above it to reset"}},
			errMatch: "no requested reset method is available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := fakeTree(t, tc.methods, tc.paths...)
			got, err := s.Reset(context.Background(), gpu, []string{"flr", "bus"})
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("attempts %+v, want %+v", got, tc.want)
			}
			if tc.errMatch == "" && err != nil || tc.errMatch != "" && (err == nil || !strings.Contains(err.Error(), tc.errMatch)) {
				t.Errorf("err %v, want %q", err, tc.errMatch)
			}
			if r := read(t, s, "reset"); (r == "1") != tc.reset {
				t.Errorf("reset file %q, want written %v", r, tc.reset)
			}
			// The method list is restored after the reset.
			if m := read(t, s, "reset_method"); m != tc.methods {
				t.Errorf("reset_method %q after the reset, want %q restored", m, tc.methods)
			}
		})
	}
}

func TestResetFailureEscalates(t *testing.T) {
	t.Parallel()
	s := fakeTree(t, "flr bus", "pci0000:40/0000:40:01.1/"+gpu)
	// A reset that fails (the kernel answers the write with an error):
	// here the reset attribute cannot be opened for writing.
	reset := filepath.Join(string(s), "devices/pci0000:40/0000:40:01.1", gpu, "reset")
	must(t, os.Remove(reset))
	must(t, os.Mkdir(reset, 0o755))
	got, err := s.Reset(context.Background(), gpu, []string{"flr", "bus"})
	if err == nil || len(got) != 2 || !strings.HasPrefix(got[0].Error, "flr reset: ") || !strings.HasPrefix(got[1].Error, "bus reset: ") {
		t.Errorf("attempts %+v, err %v: want both tried, both failed", got, err)
	}
	if errors.Is(err, pcireset.ErrUnsupported) {
		t.Errorf("a reset that ran and failed is not unsupported: %v", err)
	}
}

func TestResetWithoutResetMethodIsUnsupported(t *testing.T) {
	t.Parallel()
	s := fakeTree(t, "flr", "pci0000:40/0000:40:01.1/"+gpu)
	must(t, os.Remove(filepath.Join(string(s), "devices/pci0000:40/0000:40:01.1", gpu, "reset_method")))
	if _, err := s.Reset(context.Background(), gpu, []string{"flr"}); !errors.Is(err, pcireset.ErrUnsupported) {
		t.Errorf("old kernel: %v, want ErrUnsupported", err)
	}
}
