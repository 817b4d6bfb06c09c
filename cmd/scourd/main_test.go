package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/config"
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
	if len(back.Pipelines.Profiles) != 2 || back.Lifecycle.ReconcileInterval != 5*time.Minute || back.Lifecycle.Enabled == nil || !*back.Lifecycle.Enabled {
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
	// GOGC and GOMEMLIMIT are not in this environment: scourd's defaults.
	if !strings.Contains(errb.String(), "GOGC=400 GOMEMLIMIT=192MiB") {
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
