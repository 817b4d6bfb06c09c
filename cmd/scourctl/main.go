// Command scourctl is the operator's CLI for scour, built on cobra (the Go
// infrastructure convention: flags anywhere, -h on every command, shell
// completion, man pages). Each subcommand lives in its own file and
// registers its constructor in init(), so features add commands without
// touching this file. A command's cobra wrapper only reads flags; the work
// is in plain functions the tests and other commands call.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/placement"
	"github.com/scour-project/scour/version"
)

// cli holds the flags every command shares (--config, --env-file, -o, -c)
// and where output goes. One is made per run, so tests can run scourctl
// many times in one process.
type cli struct {
	stdout, stderr io.Writer
	root           *cobra.Command

	configPath string
	envFile    string
	out        outputFlags

	environ []string // scourd's environment, set by loadConfig
}

// commands are the constructors registered by the command files.
var commands []func(*cli) *cobra.Command

// register adds a top-level command; call it from init().
func register(newCmd func(*cli) *cobra.Command) { commands = append(commands, newCmd) }

// usageError is a mistake in the command line: exit status 2, with a hint
// to the command's help.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// exitCode ends the command with a status after it printed its own
// results (e.g. plugin test's "1 failed").
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exitConfig (EX_CONFIG, as scourd's) ends a command Keystone or
// Placement refused: the credentials of scourd's environment or
// clouds.yaml (placement.ErrCredentials) or the role of scour's user
// (placement.ErrForbidden). Running it again cannot help; changing them
// does.
const exitConfig = 78

func newRoot(stdout, stderr io.Writer) *cli {
	c := &cli{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "scourctl",
		Short: "operate scour: the cleaner of OpenStack one-time-use PCI devices",
		Long: `scourctl operates scour on a compute host: device discovery, Placement state,
cleaning records, pipeline dry-runs and plugin tests.

It reads scourd's own configuration (--config, env SCOUR_CONFIG) and the
environment file scourd's unit loads (--env-file, env SCOUR_ENV_FILE), so both
always agree on the host, Placement and the records store. Placement's
credentials are scourd's: placement.endpoint and placement.token,
placement.cloud (clouds.yaml), or the OS_* variables of the environment
file; without that file, those of scourctl's own environment (a sourced
openrc).

Exit status: 0 success; 1 failure; 2 a mistake in the command line; 78
Keystone refused the credentials (the error names the settings to check)
or Placement's policy refused the role of scour's user (it names the
rule).`,
		Version:       version.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
		// A command group without a subcommand, or with an unknown one, is a
		// usage error (cobra would print help and exit 0).
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return usagef("missing command") },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return c.out.validate()
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("scourctl {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	pf := root.PersistentFlags()
	pf.StringVar(&c.configPath, "config", envOr(configEnv, defaultConfigPath), "scourd's configuration file (env "+configEnv+")")
	pf.StringVar(&c.envFile, "env-file", envOr(envFileEnv, defaultEnvFile), "the environment file scourd's unit loads (env "+envFileEnv+"); its SCOUR_* settings and OS_* credentials apply as for scourd")
	c.out.register(root)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "print the scourctl version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(c.stdout, "scourctl %s\n", version.Version)
			return nil
		},
	})
	for _, newCmd := range commands {
		root.AddCommand(newCmd(c))
	}
	c.root = root
	return c
}

// noArgs refuses positional arguments, naming the first.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return usagef("unexpected argument %q", args[0])
}

// exactArgs wants n positional arguments, described by what.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("needs exactly %s (got %d arguments)", what, len(args))
		}
		return nil
	}
}

// group is a command that only holds subcommands.
func group(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use: use, Short: short, Long: long,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return usagef("missing subcommand") },
	}
	g.AddCommand(subs...)
	return g
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newRoot(stdout, stderr)
	c.root.SetArgs(args)
	cmd, err := c.root.ExecuteContextC(ctx)
	var ue usageError
	var ec exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return int(ec)
	case errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command ") || strings.HasPrefix(err.Error(), "required flag"):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", cmd.CommandPath(), err, cmd.CommandPath())
		return 2
	case errors.Is(err, placement.ErrCredentials), errors.Is(err, placement.ErrForbidden):
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		return exitConfig
	default:
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		return 1
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
