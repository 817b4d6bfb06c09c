package hardware

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"22.31.1014", "22.31.1014", 0},
		{"22.31", "22.31.0", 0},
		{"22.31", "22.31.1014", -1},
		{"22.9", "22.31", -1},    // numeric, not lexical
		{"100", "99", 1},         // longer number is bigger
		{"007", "7", 0},          // leading zeros ignored
		{"1.2.3a", "1.2.3b", -1}, // non-numeric components compare as strings
		{"GDC5602Q", "GDC5702Q", -1},
		{"99999999999999999999999", "99999999999999999999998", 1}, // no overflow
	} {
		if got := CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := CompareVersions(tc.b, tc.a); got != -tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

func TestParseRequirement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		raw     any
		want    Requirement
		wantErr string
	}{
		{"pci.reset", true, Requirement{Name: "pci.reset", Kind: KindBool, Bool: true}, ""},
		{"pci.driver", "nvme", Requirement{Name: "pci.driver", Kind: KindSet, Terms: []Term{{OpHas, "nvme"}}}, ""},
		{"pci.driver", []any{"vfio-pci", "nvme"}, Requirement{Name: "pci.driver", Kind: KindSet, Terms: []Term{{OpHas, "vfio-pci"}, {OpHas, "nvme"}}}, ""},
		{"nvme.sanitize", ">=block", Requirement{Name: "nvme.sanitize", Kind: KindSet, Terms: []Term{{OpGe, "block"}}}, ""},
		{"nvme.sanitize", "== crypto", Requirement{Name: "nvme.sanitize", Kind: KindSet, Terms: []Term{{OpEq, "crypto"}}}, ""},
		{"nic.firmware.fw", []string{">=22", "<23"}, Requirement{Name: "nic.firmware.fw", Kind: KindSet, Terms: []Term{{OpGe, "22"}, {OpLt, "23"}}}, ""},
		{"nvme.percent_used", 90, Requirement{Name: "nvme.percent_used", Kind: KindSet, Terms: []Term{{OpHas, "90"}}}, ""},
		{"custom.tier", "gold", Requirement{Name: "custom.tier", Kind: KindSet, Terms: []Term{{OpHas, "gold"}}}, ""},
		{"custom.flag", false, Requirement{Name: "custom.flag", Kind: KindBool}, ""},
		// malformed
		{"no.such", true, Requirement{}, "unknown capability"},
		{"", true, Requirement{}, "empty capability name"},
		{"custom.", true, Requirement{}, "unknown capability"},
		{"pci.reset", "yes", Requirement{}, "is a bool capability"},
		{"pci.driver", true, Requirement{}, "a true/false requirement cannot match"},
		{"pci.driver", ">=nvme", Requirement{}, "is a set"},
		{"nvme.sanitize", ">=blok", Requirement{}, "not one of overwrite < block < crypto"},
		{"nvme.sanitize", ">=", Requirement{}, "needs a value"},
		{"nvme.sanitize", ">==block", Requirement{}, "needs a value"},
		{"nvme.sanitize", "=crypto", Requirement{}, "unknown operator"},
		{"pci.driver", "", Requirement{}, "empty value"},
		{"pci.driver", []any{}, Requirement{}, "empty list"},
		{"pci.driver", []any{"nvme", true}, Requirement{}, "element 2"},
		{"pci.driver", map[string]any{}, Requirement{}, "want true/false, a string or a list"},
		{"pci.driver", nil, Requirement{}, "want true/false"},
	} {
		got, err := ParseRequirement(tc.name, tc.raw)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRequirement(%q, %#v) error = %v, want containing %q", tc.name, tc.raw, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRequirement(%q, %#v): %v", tc.name, tc.raw, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseRequirement(%q, %#v) mismatch (-want +got):\n%s", tc.name, tc.raw, diff)
		}
	}
	if _, err := ParseRequirement("bogus.name", true); !errors.Is(err, ErrUnknownCapability) {
		t.Errorf("unknown name error %v does not wrap ErrUnknownCapability", err)
	}
}

func TestRequirementMatch(t *testing.T) {
	t.Parallel()
	caps := Capabilities{
		"pci.reset":         Bool(true),
		"pci.iommu":         Bool(false),
		"pci.driver":        Set("nvme"),
		"kind":              Set("nvme"),
		"nvme.sanitize":     Ordered("block", "crypto"),
		"nvme.percent_used": Ordered("12"),
		"nic.firmware.fw":   Ordered("22.31.1014"),
		"custom.tags":       Set("gold", "rack12"),
	}
	for _, tc := range []struct {
		name string
		raw  any
		ok   bool
		why  string
	}{
		{"pci.reset", true, true, ""},
		{"pci.reset", false, false, "want false, have true"},
		{"pci.iommu", true, false, "want true, have false"},
		{"pci.iommu", false, true, ""},
		{"pci.sriov", true, false, "capability absent"},
		{"pci.sriov", false, true, ""}, // unset = absent = not true
		{"pci.driver", "nvme", true, ""},
		{"pci.driver", "vfio-pci", false, "vfio-pci missing"},
		{"pci.driver", []any{"vfio-pci", "nvme"}, false, "vfio-pci missing"},
		{"custom.tags", []any{"gold", "rack12"}, true, ""},
		{"nvme.sanitize", "crypto", true, ""},
		{"nvme.sanitize", "overwrite", false, "overwrite missing"},
		{"nvme.sanitize", ">=block", true, ""},
		{"nvme.sanitize", ">crypto", false, "crypto fails >crypto"},
		{"nvme.sanitize", "==crypto", true, ""},
		{"nvme.sanitize", "!=crypto", false, "fails"},
		{"nvme.sanitize", "<=overwrite", false, "fails"},
		{"nvme.percent_used", "<90", true, ""},
		{"nvme.percent_used", ">=90", false, "12 fails >=90"},
		{"nvme.percent_used", ">9", true, ""}, // numeric: 12 > 9
		{"nic.firmware.fw", "<22.31", false, "fails <22.31"},
		{"nic.firmware.fw", []any{">=22.31", "<23"}, true, ""},
		{"nic.firmware.fw", ">22.31", true, ""}, // 22.31.1014 > 22.31(.0)
		{"nic.firmware.mgmt", ">=1", false, "capability absent"},
		{"custom.tags", ">=gold", false, "a set cannot be compared"},
		{"kind", "gpu", false, "gpu missing"},
	} {
		r, err := ParseRequirement(tc.name, tc.raw)
		if err != nil {
			t.Fatalf("ParseRequirement(%q, %v): %v", tc.name, tc.raw, err)
		}
		ok, why := r.Match(caps)
		if ok != tc.ok || !strings.Contains(why, tc.why) || (tc.ok && why != "") {
			t.Errorf("%s: %v against %v = (%v, %q), want (%v, containing %q)", tc.name, tc.raw, caps[tc.name], ok, why, tc.ok, tc.why)
		}
		if !tc.ok && !strings.HasPrefix(why, tc.name+": ") {
			t.Errorf("reason %q does not name the capability", why)
		}
	}
}

func TestRequirementsYAMLAndMatchReasons(t *testing.T) {
	t.Parallel()
	var doc struct {
		Requires Requirements `yaml:"requires"`
	}
	src := `
requires:
  pci.reset: true
  nvme.sanitize: ">=block"
  nic.firmware.fw: 22.10
  pci.driver: [vfio-pci]
`
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, r := range doc.Requires {
		names = append(names, r.Name+"="+r.String())
	}
	want := []string{"nic.firmware.fw=22.10", "nvme.sanitize=>=block", "pci.driver=vfio-pci", "pci.reset=true"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("parsed requirements (-want +got):\n%s", diff)
	}
	ok, unmet := doc.Requires.Match(Capabilities{"pci.reset": Bool(true), "nvme.sanitize": Ordered("overwrite"), "pci.driver": Set("nvme")})
	if ok || len(unmet) != 3 {
		t.Fatalf("Match = %v, %q; want false with 3 reasons", ok, unmet)
	}
	for i, prefix := range []string{"nic.firmware.fw:", "nvme.sanitize:", "pci.driver:"} {
		if !strings.HasPrefix(unmet[i], prefix) {
			t.Errorf("unmet[%d] = %q, want prefix %q", i, unmet[i], prefix)
		}
	}

	bad := "requires:\n  pci.reset: maybe\n  nvme.sanitize: '>=blok'\n  what.ever: 1\n"
	err := yaml.Unmarshal([]byte(bad), &doc)
	if err == nil {
		t.Fatal("malformed requirements parsed")
	}
	for _, part := range []string{"pci.reset", "nvme.sanitize", "what.ever"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not report %s (every problem must be listed)", err, part)
		}
	}
}

func FuzzParseRequirement(f *testing.F) {
	for _, s := range []string{">=block", "==crypto", "<22.31", "nvme", "", ">=", "!=x", "=x", " <= 1.2 ", ">>"} {
		f.Add("nvme.sanitize", s)
		f.Add("nic.firmware.fw", s)
		f.Add("custom.x", s)
		f.Add("pci.driver", s)
	}
	f.Fuzz(func(t *testing.T, name, raw string) {
		r, err := ParseRequirement(name, raw)
		if err != nil {
			return
		}
		// A parsed requirement renders to a form that parses back to itself.
		terms := make([]string, len(r.Terms))
		for i, tm := range r.Terms {
			terms[i] = tm.String()
		}
		back, err := ParseRequirement(name, terms)
		if err != nil {
			t.Fatalf("re-parse of %q (from %q): %v", terms, raw, err)
		}
		if diff := cmp.Diff(r, back); diff != "" {
			t.Fatalf("round trip of %q changed (-first +second):\n%s", raw, diff)
		}
		// Matching never panics, present or absent.
		r.Match(Capabilities{name: Ordered(raw)})
		r.Match(Capabilities{name: Set(raw)})
		r.Match(nil)
	})
}
