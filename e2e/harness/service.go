package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
)

// readyTimeout bounds a container's start to ready; cold starts take about
// 7 s (RabbitMQ) and 5 s (Placement) on an idle machine.
const readyTimeout = 120 * time.Second

// service is one running container with a fixed host port, so that Stop and
// Start keep its URL (and a reconnecting client finds it again).
type service struct {
	kind     string // "rabbitmq" or "placement"
	image    string
	port     string // container port, "5672/tcp"
	env      map[string]string
	desc     string // how it is configured, for the "ready" line; may be ""
	hostPort int
	ready    func(ctx context.Context, hostPort int) error
	// customize, when set, changes the container request after the
	// harness filled it in (a cluster node's hostname, address, command).
	customize func(req *testcontainers.ContainerRequest)
	c         testcontainers.Container
	started   time.Duration
}

func startService(ctx context.Context, s *service) error {
	t0 := time.Now()
	if err := runContainer(ctx, s); err != nil {
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	s.started = time.Since(t0)
	return nil
}

// runContainer creates and starts s's container on a free host port
// (s.hostPort), without waiting for it to be ready.
func runContainer(ctx context.Context, s *service) error {
	var lastErr error
	for range 3 { // a free port can be taken between freePort and bind
		hp, err := freePort()
		if err != nil {
			return err
		}
		s.hostPort = hp
		port := network.MustParsePort(s.port)
		req := testcontainers.ContainerRequest{
			Image:        s.image,
			ExposedPorts: []string{s.port},
			Env:          s.env,
			// The owner's pid lets `make e2e-env` remove containers whose
			// test binary died before Main could (no Ryuk here).
			Labels: map[string]string{"org.scour.e2e": s.kind, "org.scour.e2e.pid": strconv.Itoa(os.Getpid())},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.PortBindings = network.PortMap{port: {{HostPort: strconv.Itoa(hp)}}}
			},
		}
		if s.customize != nil {
			s.customize(&req)
		}
		s.c, lastErr = testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
		if lastErr == nil {
			break
		}
		if s.c != nil {
			_ = s.c.Terminate(context.WithoutCancel(ctx))
			s.c = nil
		}
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	if lastErr != nil {
		return fmt.Errorf("starting %s from image %s: %w (build the images with `make e2e-images`, or set %s/%s to existing images)",
			s.kind, s.image, lastErr, EnvRabbitMQImage, EnvPlacementImage)
	}
	return nil
}

// describe is ", <desc>" or "" for the "ready" lines.
func (s *service) describe() string {
	if s.desc == "" {
		return ""
	}
	return ", " + s.desc
}

func (s *service) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		err := s.ready(ctx, s.hostPort)
		if err == nil {
			return nil
		}
		if st, serr := s.c.State(ctx); serr == nil && !st.Running {
			return fmt.Errorf("%s container exited (code %d) before it was ready: %w\n%s", s.kind, st.ExitCode, err, s.logTail(ctx))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w\n%s", s.kind, readyTimeout, err, s.logTail(context.WithoutCancel(ctx)))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *service) stop(ctx context.Context) error {
	timeout := 20 * time.Second
	if err := s.c.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stopping %s: %w", s.kind, err)
	}
	return nil
}

// kill sends SIGKILL to the container's processes, as a crashed host or
// `podman kill` would: nothing shuts down cleanly, no connection is closed
// by the broker.
func (s *service) kill(ctx context.Context) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("killing %s: %w", s.kind, err)
	}
	defer cli.Close()
	if _, err := cli.ContainerKill(ctx, s.c.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("killing %s: %w", s.kind, err)
	}
	// The kill is asynchronous: wait until the engine reports it exited.
	for {
		st, err := s.c.State(ctx)
		if err != nil {
			return fmt.Errorf("killing %s: %w", s.kind, err)
		}
		if !st.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("killing %s: still running: %w", s.kind, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pause freezes the container's processes (cgroup freezer, as `podman
// pause`): its sockets stay open and the kernel still completes TCP
// handshakes, but nothing answers: a hung host, to its clients. unpause
// thaws it.
func (s *service) pause(ctx context.Context, freeze bool) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("pausing %s: %w", s.kind, err)
	}
	defer cli.Close()
	// runc fails a freeze (and leaves the container running) when a
	// process does not stop in time, as one in a disk wait on a loaded
	// machine: try again a few times before failing the test.
	for attempt := 1; ; attempt++ {
		if freeze {
			_, err = cli.ContainerPause(ctx, s.c.GetContainerID(), client.ContainerPauseOptions{})
		} else {
			_, err = cli.ContainerUnpause(ctx, s.c.GetContainerID(), client.ContainerUnpauseOptions{})
		}
		if err == nil {
			return nil
		}
		if attempt == pauseAttempts || ctx.Err() != nil {
			return fmt.Errorf("pausing %s (freeze=%v, %d attempt(s)): %w", s.kind, freeze, attempt, err)
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// pauseAttempts bounds the tries of a container pause or unpause.
const pauseAttempts = 5

func (s *service) start(ctx context.Context) error {
	if err := s.c.Start(ctx); err != nil {
		return fmt.Errorf("starting %s again: %w", s.kind, err)
	}
	return s.waitReady(ctx)
}

func (s *service) terminate(ctx context.Context) error {
	if s.c == nil {
		return nil
	}
	return s.c.Terminate(ctx)
}

// exec runs cmd in the container and returns its combined output; a non-zero
// exit is an error carrying that output.
func (s *service) exec(ctx context.Context, user string, cmd ...string) (string, error) {
	var opts []tcexec.ProcessOption
	if user != "" {
		opts = append(opts, tcexec.WithUser(user))
	}
	opts = append(opts, tcexec.Multiplexed())
	code, r, err := s.c.Exec(ctx, cmd, opts...)
	if err != nil {
		return "", fmt.Errorf("exec %q in %s: %w", cmd, s.kind, err)
	}
	out, _ := io.ReadAll(r)
	if code != 0 {
		return string(out), fmt.Errorf("exec %q in %s: exit %d: %s", cmd, s.kind, code, out)
	}
	return string(out), nil
}

func (s *service) logTail(ctx context.Context) string {
	r, err := s.c.Logs(ctx)
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Sprintf("--- last %s logs ---\n%s", s.kind, b)
}
