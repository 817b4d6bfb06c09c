package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/internal/oslo"
	"github.com/scour-project/scour/internal/testkit"
)

func TestInvalidConfigExits2ListingEveryProblem(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--config", "../../config/testdata/invalid.yaml"}, nil, &out, &errb)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
	}
	for _, want := range []string{"log.level", "bus.url", "bus.mode", "bus.prefetch"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %s:\n%s", want, errb.String())
		}
	}
	if strings.Contains(errb.String(), "hunter2") {
		t.Error("stderr leaks the password")
	}
	if code := run(context.Background(), []string{"--config", "/nonexistent.yaml"}, nil, &out, &errb); code != 2 {
		t.Errorf("missing explicit config: exit %d, want 2", code)
	}
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"-h", "--help"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{h}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "-check-config") {
			t.Errorf("scourd %s: exit %d, stdout %q, stderr %q", h, code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--bogus"}, nil, &out, &errb); code != 2 {
		t.Errorf("scourd --bogus: exit %d, want 2", code)
	}
}

func TestCheckConfigHidesSecrets(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--check-config", "--config", "../../deploy/scour.yaml"},
		[]string{"SCOUR_BUS_URL=rabbit://nova:s3cret@rmq1:5672,nova:s3cret@rmq2:5672/nova",
			"OS_AUTH_URL=https://keystone.example:5000/v3", "OS_USERNAME=scour", "OS_PASSWORD=pw", "OS_PROJECT_NAME=service"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "rmq2:5672") {
		t.Errorf("--check-config output:\n%s", out.String())
	}
	// It prints YAML that reads back as a configuration with the same
	// profiles and defaults filled in (not Go's %+v with pointers).
	var back config.Config
	if err := yaml.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("--check-config output is not YAML: %v\n%s", err, out.String())
	}
	if len(back.Pipelines.Profiles) != 3 || back.Lifecycle.ReconcileInterval != 5*time.Minute || back.Lifecycle.Enabled == nil || !*back.Lifecycle.Enabled {
		t.Errorf("--check-config YAML lost content: %+v", back.Lifecycle)
	}
}

// A 406 on Nova's exchange exits once with 78, quickly, naming the key.
func TestExchangeMismatchExits78(t *testing.T) {
	conn := testkit.Broker(t)
	url := testkit.BrokerURL()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	nova := "nova-main-" + hex.EncodeToString(b)
	if err := ch.ExchangeDeclare(nova, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.ExchangeDelete(nova, false, false)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"--config", "../../deploy/scour.yaml"}, []string{
		"SCOUR_HOST=compute", "SCOUR_HTTP_ADDRESS=127.0.0.1:0", "SCOUR_BUS_URL=" + url, "SCOUR_BUS_NOVA_EXCHANGE=" + nova,
		"SCOUR_BUS_NOTIFICATIONS_QUEUE=scour.notifications." + nova, "SCOUR_LIFECYCLE_ENABLED=false",
	}, &out, &errb)
	if code != exitConfig {
		t.Fatalf("exit %d, want %d:\n%s", code, exitConfig, errb.String())
	}
	if !strings.Contains(errb.String(), "bus.nova.durable") || !strings.Contains(errb.String(), "406") {
		t.Errorf("log does not name the setting:\n%s", errb.String())
	}
	// GOGC is not in this environment: Go's default; GOMEMLIMIT follows
	// the cgroup's limit, or none.
	if !regexp.MustCompile(`"go runtime garbage collection","gogc":"100","gomemlimit":"(none|\d+MiB)"`).MatchString(errb.String()) {
		t.Errorf("log does not show the garbage collector's settings:\n%s", errb.String())
	}
}

// --check-config refuses what cannot start: cleaning without Placement
// credentials, a broker port that is not a number.
func TestCheckConfigRefusesWhatCannotStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string
	}{
		{"lifecycle on without Placement credentials", nil,
			[]string{"placement: no credentials", "OS_AUTH_URL", "lifecycle.enabled: false"}},
		{"OS_AUTH_URL without a password", []string{"OS_AUTH_URL=https://keystone.example/v3", "OS_USERNAME=scour"},
			[]string{"no password, token or application credential secret"}},
		{"a clouds.yaml cloud that does not exist", []string{"OS_CLOUD=prod", "OS_CLIENT_CONFIG_FILE=/nonexistent/clouds.yaml"},
			[]string{`clouds.yaml cloud "prod"`}},
		{"bus.url port notaport", []string{"SCOUR_LIFECYCLE_ENABLED=false", "SCOUR_BUS_URL=amqp://scour:pw@rmq1:notaport/"},
			[]string{`bus.url: host rmq1: port "notaport"`}},
		{"direct mode sharing one custom notifications queue across hosts",
			[]string{"SCOUR_LIFECYCLE_ENABLED=false", "SCOUR_BUS_MODE=direct", "SCOUR_BUS_NOTIFICATIONS_QUEUE=site-a.notifications"},
			[]string{"bus.notifications_queue", `"site-a.notifications.{host}"`}},
		// app.New refused it only at start (exit 1), which systemd restarts forever
		{"claims routing with the sqlite claims store",
			[]string{"SCOUR_LIFECYCLE_ENABLED=false", "SCOUR_BUS_BROADCAST_ROUTING=claims"},
			[]string{"bus.broadcast_routing: claims needs", `claims.driver is "sqlite"`}},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"--check-config", "--config", "../../deploy/scour.yaml"}, tc.environ, &out, &errb)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", tc.name, code, errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, errb.String())
			}
		}
	}
}

// A wrong broker password or a missing vhost is an ERROR naming the fix
// and exit 78 after a few refused attempts, not a WARN retried forever.
func TestBrokerRefusalExits78(t *testing.T) {
	testkit.Broker(t) // the local broker answers
	base := strings.TrimSuffix(testkit.BrokerURL(), "/")
	u, _ := url.Parse(base)
	host := u.Host
	for _, tc := range []struct{ name, url, want string }{
		{"wrong password", "amqp://guest:wrong-password@" + host + "/", "check the user and password in bus.url"},
		{"missing vhost", "amqp://guest:guest@" + host + "/scour-no-such-vhost", "vhost scour-no-such-vhost not found; create vhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			code := run(ctx, []string{"--config", "../../deploy/scour.yaml"}, []string{
				"SCOUR_HOST=compute", "SCOUR_HTTP_ADDRESS=127.0.0.1:0", "SCOUR_BUS_URL=" + tc.url, "SCOUR_LIFECYCLE_ENABLED=false",
			}, &out, &errb)
			if code != exitConfig || ctx.Err() != nil {
				t.Fatalf("exit %d (want %d before the deadline):\n%s", code, exitConfig, errb.String())
			}
			logs := errb.String()
			if !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, tc.want) || strings.Contains(logs, "broker not reachable") {
				t.Errorf("log lacks an ERROR with %q (or warns 'not reachable'):\n%s", tc.want, logs)
			}
			if strings.Contains(logs, "wrong-password") {
				t.Error("the log shows the password")
			}
		})
	}
}

// The RabbitMQ permissions docs/operations.md gives a dedicated scour user
// are enough for scourd: declaring, consuming, dispatching a command to
// the host queue and poisoning a bad message, on a fresh vhost of the
// local broker.
func TestDocumentedBrokerPermissions(t *testing.T) {
	testkit.Broker(t)
	if os.Getenv("SCOUR_TEST_AMQP_URL") != "" {
		t.Skip("SCOUR_TEST_AMQP_URL names a broker that the local rabbitmqctl does not manage")
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`rabbitmqctl set_permissions -p / scour '([^']+)' '([^']+)' '([^']+)'`).FindStringSubmatch(string(doc))
	if m == nil {
		t.Fatal("docs/operations.md has no `rabbitmqctl set_permissions -p / scour ...` line")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	vhost, user, pass := "scour-perm-"+suffix, "scour-perm-"+suffix, "pw-"+suffix
	ctl := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("rabbitmqctl", args...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ctl("add_vhost", vhost)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_vhost", vhost).Run() })
	ctl("add_user", user, pass)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_user", user).Run() })
	ctl("set_permissions", "-p", vhost, user, m[1], m[2], m[3])
	ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")

	u, _ := url.Parse(testkit.BrokerURL())
	logs := &testkit.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--config", "../../deploy/scour.yaml"}, []string{
			"SCOUR_HOST=compute", "SCOUR_HTTP_ADDRESS=127.0.0.1:0", "SCOUR_LIFECYCLE_ENABLED=false",
			"SCOUR_BUS_URL=amqp://" + user + ":" + pass + "@" + u.Host + "/" + vhost,
		}, io.Discard, logs)
	}()
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
			select {
			case code := <-done:
				t.Fatalf("scourd exited %d while waiting for %s:\n%s", code, what, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 30s:\n%s", what, logs.String())
			}
		}
	}
	wait("consuming", func() bool { return strings.Contains(logs.String(), `"msg":"consuming"`) })

	conn, err := amqp.Dial("amqp://guest:guest@" + u.Host + "/" + vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	inner, err := os.ReadFile("../../notification/testdata/versioned/instance-delete-end.json")
	if err != nil {
		t.Fatal(err)
	}
	good, err := oslo.Encode(inner)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{good, []byte("not json")} {
		if err := ch.Publish("nova", "versioned_notifications.info", false, false, amqp.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	wait("the command on the host queue", func() bool { return strings.Contains(logs.String(), `"msg":"command received"`) })
	wait("the bad message in the poison queue", func() bool {
		q, err := ch.QueueDeclarePassive("scour.poison", true, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	// amqp091-go words a refusal "Exception (403) Reason: "ACCESS_REFUSED ...";
	// a bare "403" would also match the random user and vhost names.
	for _, refused := range []string{"ACCESS_REFUSED", "(403)"} {
		if strings.Contains(logs.String(), refused) {
			t.Errorf("the broker refused something (%s):\n%s", refused, logs.String())
		}
	}
}

// SCOUR_CPU_PROFILE's file holds a profile once stopped; a file that
// cannot be created is an error, not a run without the profile asked for.
func TestCPUProfileWrittenOnStop(t *testing.T) {
	file := filepath.Join(t.TempDir(), "scourd.pprof")
	stop, err := startCPUProfile(file)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if fi, err := os.Stat(file); err != nil || fi.Size() == 0 {
		t.Fatalf("no profile written: %v", err)
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "missing", "x.pprof")); err == nil {
		t.Fatal("an uncreatable profile file was accepted")
	}
}

// --check-config accepts routing keys without the .error ones (valid) but
// says on stderr what they miss.
func TestCheckConfigNotesRoutingKeysWithoutError(t *testing.T) {
	var out, errb bytes.Buffer
	environ := []string{"SCOUR_BUS_NOVA_ROUTING_KEYS=versioned_notifications.info,notifications.info", "SCOUR_LIFECYCLE_ENABLED=false"}
	if code := run(context.Background(), []string{"--check-config", "--config", "../../deploy/scour.yaml"}, environ, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"scourd: note: bus.nova.routing_keys binds versioned_notifications.info but not versioned_notifications.error", "add notifications.error"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

// --check-config runs what a start checks without the network, and lists
// every problem at once: a plugin missing from plugin_dirs, one that is
// not executable, an http port that is not a port, a state path that
// cannot be created, and missing Placement credentials, all in one run.
// A start with the same configuration exits 2 (no systemd restart loop),
// not 1. A configuration without those problems passes, and checking it
// creates none of the directories scourd creates at start.
func TestCheckConfigRunsTheStartChecksAndListsThemAll(t *testing.T) {
	t.Parallel()
	plugins := t.TempDir()
	sh, err := os.ReadFile("../../plugins/examples/shell/zero-media")
	if err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"good": 0o755, "noexec": 0o644} {
		if err := os.WriteFile(filepath.Join(plugins, name), sh, mode); err != nil {
			t.Fatal(err)
		}
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(httpAddr, statePath string, steps ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "http: {address: %q}\nclaims: {state_path: %q}\nadmin: {socket: %q}\n", httpAddr, statePath, filepath.Join(tmp, "run", "scour", "scourd.sock"))
		fmt.Fprintf(&b, "pipelines:\n  plugin_dirs: [%q]\n  profiles:\n    - name: nvme\n      match: {kinds: [nvme]}\n      pipeline:\n        name: p\n        version: 1\n        steps:\n", plugins)
		for _, s := range steps {
			fmt.Fprintf(&b, "          - {name: %s, type: plugin, path: %q}\n", s, filepath.Join(plugins, s))
		}
		p := filepath.Join(t.TempDir(), "scour.yaml")
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := []string{"SCOUR_HOST=compute", "SCOUR_BUS_URL=amqp://scour:pw@127.0.0.1:5672/"}

	bad := write(":99999", filepath.Join(file, "state"), "missing", "noexec")
	notExecutable := "is not executable"
	if os.Geteuid() != 0 {
		notExecutable = "owned by uid" // the plugin rules want root's files; the plugin is still refused
	}
	for _, args := range [][]string{{"--check-config", "--config", bad}, {"--config", bad}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, base, &out, &errb)
		if code != 2 {
			t.Errorf("scourd %v: exit %d, want 2\n%s", args, code, errb.String())
		}
		for _, want := range []string{
			filepath.Join(plugins, "missing") + `" does not exist`,
			filepath.Join(plugins, "noexec"), notExecutable,
			`http.address: port "99999"`,
			"claims.state_path", "claims.signing_key", file + " is not a directory",
			"placement: no credentials",
		} {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("scourd %v: stderr lacks %q:\n%s", args, want, errb.String())
			}
		}
		if strings.Contains(out.String(), "configuration is valid") {
			t.Errorf("scourd %v says the configuration is valid:\n%s", args, out.String())
		}
	}

	state := filepath.Join(tmp, "not", "yet", "state")
	good := write("127.0.0.1:9464", state, "good")
	var out, errb bytes.Buffer
	environ := append(base, "OS_AUTH_URL=https://keystone.example:5000/v3", "OS_USERNAME=scour", "OS_PASSWORD=pw", "OS_PROJECT_NAME=service")
	if code := run(context.Background(), []string{"--check-config", "--config", good}, environ, &out, &errb); code != 0 {
		t.Fatalf("a startable configuration: exit %d\n%s", code, errb.String())
	}
	for _, p := range []string{filepath.Join(tmp, "not"), filepath.Join(tmp, "run")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("--check-config created %s (stat: %v)", p, err)
		}
	}

	// A configuration that is valid on a host not ready for it (a plugin
	// not installed yet): --check-config refuses it (2), a start exits 1
	// so that systemd starts it again once the plugin is there, instead
	// of leaving scourd down (exit 2 is never restarted).
	notReady := write("127.0.0.1:9464", state, "good", "missing")
	for args, want := range map[string]int{"--check-config": 2, "": 1} {
		argv := []string{"--config", notReady}
		if args != "" {
			argv = append([]string{args}, argv...)
		}
		var out, errb bytes.Buffer
		if code := run(context.Background(), argv, environ, &out, &errb); code != want || !strings.Contains(errb.String(), `" does not exist`) {
			t.Errorf("scourd %v on a host without the plugin: exit %d, want %d\n%s", argv, code, want, errb.String())
		}
	}
}
