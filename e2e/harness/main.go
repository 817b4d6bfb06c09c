package harness

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mainActive is set by Main: shared containers need a package-level owner
// that removes them when the package's tests end (Ryuk is disabled).
var mainActive atomic.Bool

var registry struct {
	mu     sync.Mutex
	shared map[string]*sharedEntry
}

type sharedEntry struct {
	once sync.Once
	svc  *service
	err  error
}

// Service names a shared service Main can start ahead of the tests.
type Service string

const (
	RabbitMQService  Service = "rabbitmq"
	PlacementService Service = "placement"
	KeystoneService  Service = "keystone"
	// KeystonePlacementService is Placement behind the shared Keystone with
	// DocumentedPlacementPolicy: what StartPlacement(t,
	// BehindKeystone(StartKeystone(t), DocumentedPlacementPolicy(t)))
	// returns. Warming it starts the shared Keystone first.
	KeystonePlacementService Service = "keystone-placement"
	// KeystoneGlanceService is Glance behind the shared Keystone with no
	// policy file: StartGlance(t, BehindKeystone(StartKeystone(t), "")).
	KeystoneGlanceService Service = "keystone-glance"
	// KeystoneLegacyGlanceService is the same with secure RBAC off:
	// StartGlance(t, BehindKeystone(StartKeystone(t), ""), SecureRBAC(false)).
	KeystoneLegacyGlanceService Service = "keystone-glance-legacy"
)

// Main runs the package's tests and then removes the containers they
// shared. Services listed in warm start concurrently in the background right
// away, so the first tests do not wait for them one after the other; others
// start on first use. Call it from TestMain:
//
//	func TestMain(m *testing.M) { harness.Main(m, harness.RabbitMQService, harness.PlacementService) }
func Main(m *testing.M, warm ...Service) { MainAfter(m, nil, warm...) }

// MainAfter is Main with setup (building binaries, say) run while the
// services in warm start; when setup fails no test runs, the containers
// are removed and the package fails with setup's error.
func MainAfter(m *testing.M, setup func() error, warm ...Service) {
	mainActive.Store(true)
	if !flag.Parsed() {
		flag.Parse() // m.Run would; -short decides whether to warm anything
	}
	// Teardown waits for the warm-ups: a container one of them is still
	// starting would otherwise be missed and left behind.
	var warming sync.WaitGroup
	if !testing.Short() {
		for _, s := range warm {
			warming.Add(1)
			go func() { defer warming.Done(); warmUp(s) }()
		}
	}
	if setup != nil {
		if err := setup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			warming.Wait()
			teardown()
			os.Exit(1)
		}
	}
	code := m.Run()
	warming.Wait()
	teardown()
	os.Exit(code)
}

func teardown() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for kind, e := range registry.shared {
		if e.svc == nil {
			continue
		}
		if err := e.svc.terminate(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "e2e harness: removing the shared %s container: %v\n", kind, err)
		}
	}
	registry.shared = nil
}

func warmUp(s Service) {
	if os.Getenv(EnvAMQPURL) != "" && s == RabbitMQService || os.Getenv(EnvPlacementURL) != "" && s == PlacementService {
		return
	}
	if err := engineEnv(); err != nil {
		return // the first test using s reports it
	}
	newSvc := map[Service]func() (*service, error){RabbitMQService: newRabbitMQ, PlacementService: newPlacement,
		KeystoneService: newKeystone(DefaultTokenExpiration)}[s]
	if newSvc != nil {
		sharedEntryFor(string(s)).start(newSvc)
		return
	}
	if s != KeystonePlacementService && s != KeystoneGlanceService && s != KeystoneLegacyGlanceService {
		return
	}
	// Behind the shared Keystone: its port is in their configuration, so
	// it starts first (or is being started by another warm-up: the same
	// once). Their service users are not needed to become ready;
	// StartPlacement and StartGlance create them before any test uses them.
	k := sharedEntryFor(string(KeystoneService))
	k.start(newKeystone(DefaultTokenExpiration))
	if k.err != nil {
		return // the first test using it reports it
	}
	keystoneURL := keystoneContainerURL(k.svc.hostPort)
	if s == KeystoneGlanceService || s == KeystoneLegacyGlanceService {
		secure := s == KeystoneGlanceService
		sharedEntryFor(keystoneGlanceKind(keystoneURL, "", secure)).start(newKeystoneGlance(keystoneURL, "", secure))
		return
	}
	policy, err := documentedPlacementPolicy()
	if err != nil {
		return // DocumentedPlacementPolicy fails the first test using it
	}
	sharedEntryFor(keystonePlacementKind(policy)).start(newKeystonePlacement(keystoneURL, policy))
}

// RunSelects reports whether this run's -run pattern can select one of the
// top-level tests names (every test, without -run): a TestMain warms a
// service only when a test that uses it will run. It parses the flags
// when TestMain has not.
func RunSelects(names ...string) bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	// The part before the first slash selects top-level tests.
	top, _, _ := strings.Cut(f.Value.String(), "/")
	re, err := regexp.Compile(top)
	if err != nil {
		return true // go test reports the bad pattern
	}
	for _, n := range names {
		if re.MatchString(n) {
			return true
		}
	}
	return false
}

// Option changes how StartRabbitMQ and StartPlacement get their service.
type Option func(*options)

type options struct {
	dedicated       bool
	tokenExpiration time.Duration // StartKeystone
	keystone        *Keystone     // StartPlacement: BehindKeystone
	policy          string
	legacyRBAC      bool // StartGlance: SecureRBAC(false)
}

// Dedicated gives the test a container of its own, removed when the test
// ends, so it can Stop, Start and Restart it without disturbing other tests.
// It costs a container start (seconds).
func Dedicated() Option { return func(o *options) { o.dedicated = true } }

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: needs RabbitMQ and Placement containers; skipped under -short")
	}
}

// acquire returns the package's shared service of this kind, starting it on
// first use, or a dedicated one owned by t.
func acquire(t testing.TB, newSvc func() (*service, error), kind string, dedicated bool) *service {
	t.Helper()
	if err := engineEnv(); err != nil {
		t.Fatalf("e2e harness: %v", err)
	}
	if dedicated {
		s, err := newSvc()
		if err == nil {
			err = startService(t.Context(), s)
		}
		if s != nil && s.c != nil {
			t.Cleanup(func() { _ = s.terminate(context.Background()) })
		}
		if err != nil {
			t.Fatalf("e2e harness: %v", err)
		}
		t.Logf("e2e harness: dedicated %s%s ready on localhost:%d in %s", kind, s.describe(), s.hostPort, s.started.Round(time.Millisecond))
		return s
	}
	if !mainActive.Load() {
		t.Fatalf("e2e harness: shared containers need a package-level owner: add `func TestMain(m *testing.M) { harness.Main(m) }` to this package's tests (or pass harness.Dedicated())")
	}
	e := sharedEntryFor(kind)
	e.start(newSvc)
	if e.err != nil {
		t.Fatalf("e2e harness: %v", e.err)
	}
	return e.svc
}

func sharedEntryFor(kind string) *sharedEntry {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.shared == nil {
		registry.shared = map[string]*sharedEntry{}
	}
	e := registry.shared[kind]
	if e == nil {
		e = &sharedEntry{}
		registry.shared[kind] = e
	}
	return e
}

// start starts the shared service once; later callers wait for that start.
func (e *sharedEntry) start(newSvc func() (*service, error)) {
	e.once.Do(func() {
		// The shared container outlives this test: start it on a context
		// that the test's end does not cancel.
		ctx, cancel := context.WithTimeout(context.Background(), 3*readyTimeout)
		defer cancel()
		s, err := newSvc()
		if err == nil {
			err = startService(ctx, s)
		}
		e.svc, e.err = s, err
		if err == nil {
			fmt.Fprintf(os.Stderr, "e2e harness: %s (%s%s) ready on localhost:%d in %s\n", s.kind, s.image, s.describe(), s.hostPort, s.started.Round(time.Millisecond))
		}
	})
}
