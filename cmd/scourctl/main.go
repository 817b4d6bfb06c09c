// Command scourctl is the operator's CLI for scour. Each subcommand lives in
// its own file and registers itself in init(), so features add commands
// without touching this file.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/scour-project/scour/version"
)

// subcommand is one `scourctl <name> ...` command.
type subcommand struct {
	summary string
	// run gets the arguments after the subcommand name and returns the
	// process exit code; it prints its own errors to stderr.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var subcommands = map[string]subcommand{}

func register(name string, c subcommand) {
	if _, dup := subcommands[name]; dup {
		panic("scourctl: duplicate subcommand " + name)
	}
	subcommands[name] = c
}

func init() {
	register("version", subcommand{
		summary: "print the scourctl version",
		run: func(_ context.Context, _ []string, stdout, _ io.Writer) int {
			fmt.Fprintf(stdout, "scourctl %s\n", version.Version)
			return 0
		},
	})
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: scourctl <command> [arguments]\n\ncommands:\n")
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, subcommands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'scourctl <command> -h' for a command's options.\n")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "-v", "--version":
		args[0] = "version"
	}
	c, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "scourctl: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
