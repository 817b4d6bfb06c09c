//go:build mangen

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `make man` writes a page per command, each with its options.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := recordsCLI("gen-man", dir); code != 0 {
		t.Fatalf("gen-man: exit %d: %s", code, errs)
	}
	for page, want := range map[string]string{
		"scourctl.1":                        "scourctl",
		"scourctl-records-list.1":           "--limit",
		"scourctl-placement-unquarantine.1": "stays reserved",
		"scourctl-completion-bash.1":        "bash",
		"scourctl-status.1":                 "--output",
		"scourctl-retire.1":                 "--no-wipe",
		"scourctl-pipeline-dry-run.1":       "retired unwiped",
	} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("no man page %s: %v", page, err)
			continue
		}
		if !bytes.HasPrefix(b, []byte(".nh")) && !bytes.Contains(b, []byte(".TH")) {
			t.Errorf("%s is not a man page:\n%.200s", page, b)
		}
		if !strings.Contains(strings.ReplaceAll(string(b), "\\-", "-"), want) {
			t.Errorf("%s lacks %q", page, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "scourctl-gen-man.1")); err == nil {
		t.Errorf("the hidden gen-man command has a man page")
	}
}
