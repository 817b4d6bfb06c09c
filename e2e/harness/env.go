package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Environment variables the harness reads.
const (
	EnvAMQPURL        = "SCOUR_E2E_AMQP_URL"        // use this broker instead of a container
	EnvPlacementURL   = "SCOUR_E2E_PLACEMENT_URL"   // use this Placement instead of a container
	EnvPlacementToken = "SCOUR_E2E_PLACEMENT_TOKEN" // X-Auth-Token for EnvPlacementURL (default "admin")
	EnvRabbitMQImage  = "SCOUR_E2E_RABBITMQ_IMAGE"  // image instead of the scour-built one
	EnvPlacementImage = "SCOUR_E2E_PLACEMENT_IMAGE" // image instead of the scour-built one
	EnvGlanceImage    = "SCOUR_E2E_GLANCE_IMAGE"    // image instead of the scour-built one
	EnvKeystoneImage  = "SCOUR_E2E_KEYSTONE_IMAGE"  // image instead of the scour-built one
	EnvPodmanSocket   = "SCOUR_E2E_PODMAN_SOCKET"   // engine socket (default /run/podman/podman.sock)

	// The Placement container's database and uwsgi worker processes (see
	// placementMode): "postgresql" with 4 workers unless set; "sqlite"
	// is the old one-request-at-a-time mode, kept for comparison.
	EnvPlacementDB      = "SCOUR_E2E_PLACEMENT_DB"
	EnvPlacementWorkers = "SCOUR_E2E_PLACEMENT_WORKERS"
)

const defaultPodmanSocket = "/run/podman/podman.sock"

// errNoEngine tells the developer the one command that fixes a missing engine.
var errNoEngine = errors.New("no container engine answers: run `make e2e-env` (installs podman, starts its socket, builds the images), or set " +
	EnvAMQPURL + " and " + EnvPlacementURL + " to use existing services")

// engineEnv points testcontainers-go at podman's Docker-compatible socket
// unless the caller configured an engine, so plain `go test ./e2e/...` works
// after `make e2e-env`. Ryuk is disabled because its image cannot be pulled
// here; Main removes the containers instead.
func engineEnv() error {
	setDefault := func(k, v string) {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
	sock := os.Getenv(EnvPodmanSocket)
	if sock == "" {
		sock = defaultPodmanSocket
	}
	setDefault("DOCKER_HOST", "unix://"+sock)
	setDefault("TESTCONTAINERS_RYUK_DISABLED", "true")
	setDefault("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
	host := os.Getenv("DOCKER_HOST")
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		c, err := net.DialTimeout("unix", path, 2*time.Second)
		if err != nil {
			return fmt.Errorf("DOCKER_HOST=%s: %w: %w", host, err, errNoEngine)
		}
		c.Close()
	}
	return nil
}

// freePort asks the kernel for a free TCP port on the host. Containers bind
// fixed host ports so that a stopped and restarted container keeps its URL.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
