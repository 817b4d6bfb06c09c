package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMain warms the shared Keystone, its Placement and its Glances (secure
// RBAC on and off) only for the tests it names: a test on them missing from those lists would
// still pass (it starts them itself, in a parallel slot), so this keeps
// the lists true. No containers.
func TestWarmListsNameTheKeystoneTests(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var shared, glance, legacy []string
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch f := call.Fun.(type) {
				case *ast.Ident: // newKeystoneCloud(t, false, ...): the shared Keystone
					if f.Name == "newKeystoneCloud" && len(call.Args) > 1 {
						if b, ok := call.Args[1].(*ast.Ident); ok && b.Name == "false" {
							shared = append(shared, fn.Name.Name)
						}
					}
				case *ast.SelectorExpr:
					switch f.Sel.Name {
					case "glanceBehindKeystone":
						glance = append(glance, fn.Name.Name)
					case "legacyGlanceBehindKeystone":
						legacy = append(legacy, fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	if len(shared) == 0 || len(glance) == 0 || len(legacy) == 0 {
		t.Fatalf("found no test on the shared Keystone (%v), its Glance (%v) or its Glance without secure RBAC (%v): has newKeystoneCloud, glanceBehindKeystone or legacyGlanceBehindKeystone changed?", shared, glance, legacy)
	}
	for _, c := range []struct {
		list, found []string
		name        string
	}{{keystoneSharedTests, shared, "keystoneSharedTests"}, {keystoneGlanceTests, glance, "keystoneGlanceTests"},
		{keystoneLegacyGlanceTests, legacy, "keystoneLegacyGlanceTests"}} {
		slices.Sort(c.found)
		c.found = slices.Compact(c.found)
		got := slices.Sorted(slices.Values(c.list))
		if !slices.Equal(got, c.found) {
			t.Errorf("%s (main_test.go) = %v; the tests using that service are %v", c.name, got, c.found)
		}
	}
}
