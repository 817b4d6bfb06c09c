// Package testkit holds the helpers several packages' tests share: the
// local RabbitMQ they run against, a log sink safe to read while written,
// and waiting for a process to be gone. Only tests import it.
package testkit

import (
	"bytes"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BrokerURL is the broker integration tests use: SCOUR_TEST_AMQP_URL, or
// the local RabbitMQ every development and CI machine runs.
func BrokerURL() string {
	if u := os.Getenv("SCOUR_TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Broker connects to BrokerURL for an integration test, closed when the
// test ends. The test fails when the broker is unreachable; only
// `go test -short` skips it.
func Broker(t testing.TB) *amqp.Connection {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs RabbitMQ (run without -short)")
	}
	conn, err := amqp.Dial(BrokerURL())
	if err != nil {
		t.Fatalf("RabbitMQ at %s is unreachable (start it with scripts/ensure-services.sh or set SCOUR_TEST_AMQP_URL): %v", redact(BrokerURL()), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// BrokerVersion is the version BrokerURL's broker announces ("4.0.5"):
// for tests whose expectation differs between RabbitMQ releases.
func BrokerVersion(t testing.TB) string {
	t.Helper()
	v, _ := Broker(t).Properties["version"].(string)
	return v
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// SyncBuffer is a bytes.Buffer that a logger or a process may write while
// the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len is how many bytes were written so far.
func (s *SyncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// From returns what was written after the first off bytes: a test that
// waits for a line polls only what is new, not the whole log each time.
func (s *SyncBuffer) From(off int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b.Bytes()[min(off, s.b.Len()):])
}

// WaitGone fails t unless the process whose pid is in pidFile is gone
// (or a zombie waiting for its reaper) within d.
func WaitGone(t testing.TB, pidFile string, d time.Duration) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(d)
	for Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d (pid file %s) still running after %s", pid, pidFile, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Alive reports whether pid runs; a zombie counts as gone.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// WaitFor polls cond every 20 ms and fails t when it is still false after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CPUTime is this process's user + system CPU time so far, for benchmarks
// that report CPU per operation next to wall time.
func CPUTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
