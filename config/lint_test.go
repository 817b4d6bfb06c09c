package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadText(t *testing.T, body string, environ ...string) error {
	t.Helper()
	p := filepath.Join(t.TempDir(), "scour.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, true, append(environ, "SCOUR_LIFECYCLE_ENABLED=false", "SCOUR_HOST=cmp1"))
	return err
}

// Every mistake that can be known offline is reported at once, with the
// key path, the line, the offending value and a hint, and never in Go's
// type names.
func TestCheckConfigMessages(t *testing.T) {
	t.Parallel()
	err := loadText(t, `bus:
  prefetsh: 10
  shutdown_timeout: 10
  retry: {initial: soon}
  url: "amqp://scour:hunter2@rmq1:notaport,scour:hunter2@rmq2:5672/"
  nova: {durable: maybe, routing_keys: versioned_notifications.info}
log: {levle: debug}
hardware:
  backend: simulated
  simulator:
    devices:
      - {address: "0000:81:00.0", kind: nvme, namespces: 2}
      - {address: "0000:82:00.0", knd: gpu}
lifecycle:
  reconcile_interval: 5
colour: blue
`)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		`line 2: bus.prefetsh: unknown key "prefetsh"; did you mean "prefetch"?`,
		`line 3: bus.shutdown_timeout: "10" is not a duration; write 10s`,
		`line 4: bus.retry.initial: "soon" is not a duration; write it as a number with a unit`,
		`line 6: bus.nova.durable: "maybe" is not a boolean; write true or false`,
		`line 6: bus.nova.routing_keys: want a list, got "versioned_notifications.info"; write [versioned_notifications.info]`,
		`line 7: log.levle: unknown key "levle"; did you mean "level"?`,
		`line 12: hardware.simulator.devices[0].namespces: unknown key "namespces"; did you mean "namespaces"?`,
		`line 13: hardware.simulator.devices[1].knd: unknown key "knd"; did you mean "kind"?`,
		`line 15: lifecycle.reconcile_interval: "5" is not a duration; write 5s`,
		`line 16: colour: unknown key "colour" (known keys here: admin, bus, claims, hardware, host, http, images, lifecycle, log, node, pipelines, placement)`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("lacks %q in:\n%s", want, msg)
		}
	}
	for _, leak := range []string{"hunter2", "bus.Config", "time.Duration", "!!int"} {
		if strings.Contains(msg, leak) {
			t.Errorf("message shows %q:\n%s", leak, msg)
		}
	}

	// Once the file's shape is right, values are checked: the port.
	err = loadText(t, "bus:\n  url: \"amqp://scour:hunter2@rmq1:notaport,scour:hunter2@rmq2:5672/\"\n")
	if err == nil || !strings.Contains(err.Error(), `bus.url: host rmq1: port "notaport" is not a number from 1 to 65535`) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("port notaport: %v", err)
	}
	if err := loadText(t, "bus:\n  url: \"amqp://scour:pw@rmq1:5672/\"\n"); err != nil {
		t.Errorf("a good url: %v", err)
	}
	// Environment overrides get the duration hint too.
	if err := loadText(t, "", "SCOUR_BUS_SHUTDOWN_TIMEOUT=20"); err == nil || !strings.Contains(err.Error(), "write 20s") {
		t.Errorf("SCOUR_BUS_SHUTDOWN_TIMEOUT=20: %v", err)
	}
	// The scalar short form of a section that decodes itself stays valid.
	if err := loadText(t, "hardware: simulated\n"); err != nil && strings.Contains(err.Error(), "hardware:") && strings.Contains(err.Error(), "mapping") {
		t.Errorf("hardware: simulated: %v", err)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"prefetsh", "prefetch", 1}, {"", "abc", 3}, {"knd", "kind", 1}, {"kitten", "sitting", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}
