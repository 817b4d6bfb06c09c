//go:build mangen

// Man pages: `make man` builds scourctl with -tags mangen and runs the
// hidden `gen-man DIR` command, so the shipped binary does not carry the
// man page renderer.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/scour-project/scour/version"
)

func init() {
	register(func(c *cli) *cobra.Command {
		return &cobra.Command{
			Use:    "gen-man DIR",
			Short:  "write the man pages of every scourctl command to DIR",
			Hidden: true,
			Args:   exactArgs(1, "the output DIR"),
			RunE: func(_ *cobra.Command, args []string) error {
				return writeManPages(c.root, args[0])
			},
		}
	})
}

// writeManPages writes scourctl.1 and one page per command
// (scourctl-records-list.1, ...) to dir.
func writeManPages(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root.DisableAutoGenTag = true // reproducible pages: no generation date
	return doc.GenManTree(root, &doc.GenManHeader{Title: "SCOURCTL", Section: "1", Source: "scour " + version.Version, Manual: "Scour manual"}, dir)
}
