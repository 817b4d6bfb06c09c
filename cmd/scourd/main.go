// Command scourd is Scour's per-compute-host worker: it consumes Nova's
// notifications, routes them to the host they concern and acts on them.
//
// Exit status: 0 after a clean stop (SIGTERM/SIGINT), 2 for an invalid
// configuration (--check-config runs the same checks: values, Placement
// credentials, plugins, paths; a few problems show only at start, such as
// a claims store whose rows say host must be set), 78
// (EX_CONFIG) when the broker refuses scour's login (user, password, vhost)
// or its topology (e.g. bus.nova.durable differs from Nova's
// amqp_durable_queues), when Keystone refuses scour's credentials at start
// or Placement's policy refuses its role (the shipped systemd unit does
// not restart on any of these), 1 otherwise (Keystone or Placement
// unreachable at start: restarted).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/app"
	"github.com/scour-project/scour/bus"
	"github.com/scour-project/scour/bus/broker"
	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/placement"
	"github.com/scour-project/scour/version"
)

const exitConfig = 78 // EX_CONFIG from sysexits.h

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scourd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", envOr(environ, "SCOUR_CONFIG", config.DefaultPath), "configuration file (env SCOUR_CONFIG)")
	check := fs.Bool("check-config", false, "validate the configuration, print it (secrets hidden) and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// Asked for: the usage on stdout, success.
			fs.SetOutput(stdout)
			fmt.Fprintf(stdout, "usage: scourd [--config FILE] [--check-config] [--version]\n\n")
			fs.PrintDefaults()
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "scourd %s\n", version.Version)
		return 0
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	// The same checks for --check-config and for a start: what the
	// check accepts starts, as far as this host can tell without the
	// network (Placement credentials, plugins, paths). A start refused
	// for the configuration exits 2, which systemd does not restart; one
	// refused only because the host is not ready (a plugin not installed
	// or answering, a directory not creatable: config.ErrHostNotReady)
	// exits 1, which it restarts, since a scourd that stays down fences
	// nothing. --check-config exits 2 for either.
	cfg, err := config.LoadChecked(*path, explicit || *path != config.DefaultPath, environ)
	if err != nil {
		fmt.Fprintf(stderr, "scourd: %v\n", err)
		if !*check && hostOnly(*path, explicit || *path != config.DefaultPath, environ, err) {
			fmt.Fprintf(stderr, "scourd: the host is not ready for this configuration (above); exiting 1 so that systemd starts scourd again\n")
			return 1
		}
		return 2
	}
	if *check {
		// The effective configuration, defaults filled in, in the file's
		// own format, so it can be diffed against scour.yaml.
		out, err := yaml.Marshal(cfg.Redacted())
		if err != nil {
			fmt.Fprintf(stderr, "scourd: printing the configuration: %v\n", err)
			return 1
		}
		for _, n := range cfg.Bus.Notes() {
			fmt.Fprintf(stderr, "scourd: note: %s\n", n)
		}
		fmt.Fprintf(stdout, "# configuration is valid (secrets hidden)\n%s", out)
		return 0
	}
	log := app.NewLogger(cfg.Log, stderr)
	for _, n := range cfg.Bus.Notes() {
		log.Warn("configuration note: " + n)
	}
	// GOMEMLIMIT: the environment's when set, else 75% of the cgroup's
	// memory limit (the pod's limit, a systemd MemoryMax; the rest is for
	// the pipelines' tools, which run in the same cgroup), else none.
	// GOGC stays Go's default unless the environment sets it.
	limit, _ := memlimit.Set(memlimit.WithRatio(0.75), memlimit.WithLogger(log.With("component", "memlimit")))
	log.Info("go runtime garbage collection", "gogc", envOr(environ, "GOGC", "100"), "gomemlimit", memLimit(limit))
	// SCOUR_CPU_PROFILE=FILE (off unless set; for measurements, not
	// production): a Go CPU profile of this run, written when scourd exits
	// (docs/operations.md, "Where the time goes").
	if file := envOr(environ, "SCOUR_CPU_PROFILE", ""); file != "" {
		stopProfile, err := startCPUProfile(file)
		if err != nil {
			log.Error("cannot start the CPU profile: fix or unset SCOUR_CPU_PROFILE", "file", file, "err", err)
			return 1
		}
		defer stopProfile()
	}
	a, cleanup, err := app.New(cfg, log, app.Deps{})
	switch {
	case errors.Is(err, config.ErrInvalid):
		log.Error("cannot start: change the configuration (scourd will not retry)", "err", err)
		return 2
	case errors.Is(err, placement.ErrCredentials):
		log.Error("Keystone refused scour's credentials: change them (scourd will not retry)",
			"setting", "placement (clouds.yaml or the OS_* variables of scourd's environment)", "err", err)
		return exitConfig
	case errors.Is(err, placement.ErrForbidden):
		log.Error("Placement's policy refused scour's Keystone role: grant the role docs/operations.md names (scourd will not retry)",
			"setting", "the Keystone role of scour's user, Placement's policy.yaml", "err", err)
		return exitConfig
	case err != nil:
		log.Error("cannot start", "err", err)
		return 1
	}
	defer cleanup()

	// A second signal, or a stop that outlives the shutdown budget, exits
	// at once: in-flight messages are unacked, so the broker requeues them.
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
		case <-finished:
			return
		}
		force := make(chan os.Signal, 1)
		signal.Notify(force, syscall.SIGTERM, os.Interrupt)
		defer signal.Stop(force)
		select {
		case <-force:
		case <-time.After(cfg.Bus.ShutdownTimeout + 5*time.Second):
		case <-finished:
			return
		}
		log.Error("forced exit before a graceful stop finished")
		os.Exit(1)
	}()

	err = a.Run(ctx)
	var te *bus.TopologyError
	var ae *broker.AccessError
	switch {
	case errors.As(err, &te):
		log.Error("the broker refused scour's topology: change the configuration (scourd will not retry)",
			"setting", te.Setting, "err", err)
		return exitConfig
	case errors.As(err, &ae):
		log.Error("the broker refused scour's login: change the configuration (scourd will not retry)",
			"setting", "bus.url (SCOUR_BUS_URL)", "fix", ae.Fix(), "err", err)
		return exitConfig
	case err != nil:
		log.Error("scourd failed", "err", err)
		return 1
	}
	return 0
}

func envOr(environ []string, key, def string) string {
	for _, kv := range environ {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			return kv[len(key)+1:]
		}
	}
	return def
}

// memLimit shows a GOMEMLIMIT in MiB, or "none".
func memLimit(b int64) string {
	if b == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%dMiB", b>>20)
}

// startCPUProfile starts a Go CPU profile written to file; the returned
// func stops it and closes the file.
func startCPUProfile(file string) (func(), error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// hostOnly reports whether err, LoadChecked's, holds only problems of the
// host (config.ErrHostNotReady): the configuration's values pass
// Validate and its credentials are complete.
func hostOnly(path string, required bool, environ []string, err error) bool {
	if !errors.Is(err, config.ErrHostNotReady) || errors.Is(err, config.ErrInvalid) {
		return false
	}
	_, verr := config.Load(path, required, environ)
	return verr == nil
}
