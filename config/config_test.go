package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestExampleConfigLoads(t *testing.T) {
	t.Parallel()
	c, err := Load("../deploy/scour.yaml", true, nil)
	if err != nil {
		t.Fatalf("deploy/scour.yaml: %v", err)
	}
	if c.Bus.Nova.Exchange != "nova" || c.Bus.NotificationsQueue != "scour.notifications" || c.Bus.ClassicQueues {
		t.Errorf("example config: %+v", c.Bus)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/does-not-exist.yaml", false, []string{"SCOUR_HOST=cmp1", "SCOUR_LIFECYCLE_ENABLED=false"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "cmp1" || c.Node != "cmp1" || c.HTTP.Address != ":9464" || c.Log.Format != "json" ||
		c.Bus.URL == "" || c.Bus.Exchange != "scour" || c.Bus.PoisonQueue != "scour.poison" ||
		strings.Join(c.Bus.Nova.RoutingKeys, ",") != "versioned_notifications.info,versioned_notifications.error,notifications.info,notifications.error" || c.Bus.Nova.Durable {
		t.Errorf("defaults: %+v", c)
	}
	if c.HostDefaulted {
		t.Error("HostDefaulted with SCOUR_HOST set")
	}
	if _, err := Load("testdata/does-not-exist.yaml", true, nil); err == nil {
		t.Error("a required missing file is an error")
	}
}

// Nova's [DEFAULT] host defaults to socket.gethostname(), uncut: on a
// machine whose kernel hostname is an FQDN, a short default would bind
// scour.host.cmp1 while Nova routes to cmp1.example.com. Not parallel: it
// replaces hostname.
func TestHostDefaultsToUncutHostname(t *testing.T) {
	old := hostname
	t.Cleanup(func() { hostname = old })
	hostname = func() (string, error) { return "cmp1.example.com", nil }
	c, err := Load("testdata/does-not-exist.yaml", false, []string{"SCOUR_LIFECYCLE_ENABLED=false"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "cmp1.example.com" || c.Node != "cmp1.example.com" || c.Lifecycle.Host != "cmp1.example.com" {
		t.Errorf("host %q node %q lifecycle.host %q, want cmp1.example.com (Nova's default)", c.Host, c.Node, c.Lifecycle.Host)
	}
	if !c.HostDefaulted {
		t.Error("HostDefaulted false for the hostname default (scourd's upgrade check needs it)")
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	c, err := Load("../deploy/scour.yaml", true, []string{
		"SCOUR_HOST=cmp7", "SCOUR_NODE=cmp7.example", "SCOUR_BUS_URL=rabbit://nova:pw@r1:5672,nova:pw@r2:5672/nova",
		"SCOUR_BUS_NOVA_DURABLE=true", "SCOUR_BUS_NOVA_ROUTING_KEYS=notifications-cmp7.info, versioned_notifications.info",
		"SCOUR_BUS_RETRY_INITIAL=1s", "SCOUR_BUS_PREFETCH=64", "SCOUR_LOG_FORMAT=text", "PATH=/bin", "SCOUR_TEST_AMQP_URL=x",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "cmp7" || c.Node != "cmp7.example" || !c.Bus.Nova.Durable || c.Bus.Retry.Initial != time.Second ||
		c.Bus.Prefetch != 64 || c.Log.Format != "text" || strings.Join(c.Bus.Nova.RoutingKeys, "|") != "notifications-cmp7.info|versioned_notifications.info" {
		t.Errorf("overrides not applied: %+v", c)
	}
	if strings.Contains(c.Redacted().Bus.URL, "pw") {
		t.Errorf("Redacted leaks: %s", c.Redacted().Bus.URL)
	}
	_, err = Load("../deploy/scour.yaml", true, []string{"SCOUR_BUS_PREFETCH=many", "SCOUR_BUS_NOVA_DURABLE=perhaps", "SCOUR_BUS_HEARTBEAT=5"})
	for _, want := range []string{"SCOUR_BUS_PREFETCH=many", "SCOUR_BUS_NOVA_DURABLE=perhaps", "SCOUR_BUS_HEARTBEAT=5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/invalid.yaml", true, nil)
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	msg := err.Error()
	for _, want := range []string{"host:", "log.level", "log.format", "bus.url", "bus.mode", "bus.prefetch", "bus.nova.passive", "bus.notifications_queue"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not report %s:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("error leaks the password:\n%s", msg)
	}
	_, err = Load("testdata/typo.yaml", true, nil)
	if err == nil || !strings.Contains(err.Error(), "prefech") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("typo: %v", err)
	}
}

func TestEnvVarsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range EnvVars() {
		if !strings.Contains(string(doc), v.Name) {
			t.Errorf("docs/configuration.md does not document %s (%s)", v.Name, v.Key)
		}
	}
}

// A cleaning scourd without profiles could never clean anything: that is a
// configuration error, while a dispatch-only scourd needs none.
func TestLifecycleNeedsPipelines(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/does-not-exist.yaml", false, []string{"SCOUR_HOST=cmp1"})
	if err == nil || !strings.Contains(err.Error(), "pipelines.profiles") {
		t.Fatalf("lifecycle enabled without profiles: want a pipelines.profiles error, got %v", err)
	}
	c, err := Load("testdata/does-not-exist.yaml", false, []string{"SCOUR_HOST=cmp1", "SCOUR_LIFECYCLE_ENABLED=false"})
	if err != nil {
		t.Fatalf("dispatch-only: %v", err)
	}
	if !c.Lifecycle.Disabled() || c.Placement.Node != "cmp1" {
		t.Errorf("dispatch-only config: lifecycle %+v, placement node %q", c.Lifecycle, c.Placement.Node)
	}
}

// bus.broadcast_routing: claims works only with the lifecycle and one
// PostgreSQL claims database; validation says so (--check-config, exit 2)
// instead of the start failing with exit 1 that systemd retries forever.
func TestClaimsRoutingNeedsPostgres(t *testing.T) {
	t.Parallel()
	base := []string{"SCOUR_HOST=cmp1", "SCOUR_LIFECYCLE_ENABLED=false", "SCOUR_BUS_BROADCAST_ROUTING=claims"}
	for _, tc := range []struct {
		name  string
		extra []string
		bad   bool
	}{
		{"sqlite", nil, true},
		{"postgres without the lifecycle", []string{"SCOUR_CLAIMS_DRIVER=postgres", "SCOUR_CLAIMS_DSN=postgres://scour@db/scour"}, true},
		{"direct mode has no dispatcher", []string{"SCOUR_BUS_MODE=direct"}, false},
		{"broadcast", []string{"SCOUR_BUS_BROADCAST_ROUTING=broadcast"}, false},
	} {
		_, err := Load("testdata/does-not-exist.yaml", false, append(append([]string{}, base...), tc.extra...))
		if got := err != nil && strings.Contains(err.Error(), "bus.broadcast_routing: claims needs"); got != tc.bad {
			t.Errorf("%s: error %v, want a bus.broadcast_routing error: %v", tc.name, err, tc.bad)
		}
	}
}

func TestExampleConfigSections(t *testing.T) {
	t.Parallel()
	c, err := Load("../deploy/scour.yaml", true, []string{"SCOUR_HOST=cmp9", "SCOUR_PLACEMENT_TOKEN=s3cret",
		"SCOUR_CLAIMS_DSN=postgres://scour:pw@db/scour", "SCOUR_CLAIMS_DRIVER=postgres",
		"SCOUR_PLACEMENT_ENDPOINT=http://placement:8778"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Placement.Node != "cmp9" || c.Lifecycle.Host != "cmp9" || len(c.Pipelines.Profiles) != 3 ||
		c.Claims.ClaimExpiry != 300*time.Second || c.Lifecycle.ReconcileInterval != 5*time.Minute {
		t.Errorf("example sections: placement node %q, lifecycle %+v, %d profiles, claims %+v",
			c.Placement.Node, c.Lifecycle, len(c.Pipelines.Profiles), c.Claims)
	}
	r := c.Redacted()
	if strings.Contains(r.Placement.Token, "s3cret") || strings.Contains(r.Claims.DSN, "pw") {
		t.Errorf("Redacted leaks: token %q dsn %q", r.Placement.Token, r.Claims.DSN)
	}
}

// scan_debounce 0 means no debounce; it does not silently become the
// default (1s), whether it comes from the file or the environment.
func TestZeroScanDebounceIsKept(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		{"SCOUR_HOST=cmp1", "SCOUR_LIFECYCLE_ENABLED=false", "SCOUR_LIFECYCLE_SCAN_DEBOUNCE=0s"},
		{"SCOUR_HOST=cmp1", "SCOUR_LIFECYCLE_ENABLED=false"},
	} {
		c, err := Load("testdata/does-not-exist.yaml", false, env)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Second
		if len(env) == 3 {
			want = 0
		}
		if d := c.Lifecycle.ScanDebounce; d == nil || *d != want {
			t.Errorf("env %v: scan_debounce = %v, want %v", env, d, want)
		}
	}
}

// scourd --check-config prints Redacted(): a libpq key=value DSN or a
// password in the URL's query must not come out verbatim.
func TestRedactedHidesEveryDSNForm(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"host=db user=scour password=hunter2 dbname=scour",
		"postgres://scour@db/scour?password=hunter2",
		"postgres://scour:hunter2@db/scour?sslpassword=hunter2",
	} {
		var c Config
		c.Claims.DSN = dsn
		if got := c.Redacted().Claims.DSN; strings.Contains(got, "hunter2") || !strings.Contains(got, "db") {
			t.Errorf("Redacted claims.dsn %q: %q", dsn, got)
		}
	}
}

// A step naming a Glance image needs images.glance.owners: scour reads
// Glance as an account that may see every project's images, and without
// trusted projects a tenant's upload could pass for the golden image.
func TestGlanceStepNeedsOwners(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{nil, {"SCOUR_IMAGES_GLANCE_OWNERS=ops1, ops2"}} {
		c, err := Load("../deploy/scour.yaml", true, env)
		if err != nil {
			t.Fatalf("deploy/scour.yaml: %v", err)
		}
		named := false
		for _, pr := range c.Pipelines.Profiles {
			for _, s := range pr.Pipeline.Steps {
				if s.Type == "fpga-program" {
					s.Args["image"] = map[string]any{"glance_query": map[string]any{"tags": []any{"golden"}}}
					named = true
				}
			}
		}
		if !named {
			t.Fatal("deploy/scour.yaml has no fpga-program step to point at Glance")
		}
		err = c.Validate()
		if env == nil {
			if err == nil || !strings.Contains(err.Error(), "images.glance.owners: required") || !strings.Contains(err.Error(), "step program") {
				t.Errorf("Glance step without owners: %v, want an error naming images.glance.owners and the step", err)
			}
			continue
		}
		if err != nil || len(c.Images.Glance.Owners) != 2 || c.Images.Glance.Owners[1] != "ops2" {
			t.Errorf("with owners %v: %v", c.Images.Glance.Owners, err)
		}
	}
}

// Review finding (L3): a second YAML document in the config file was
// silently ignored, even with an unknown key: a profile or setting an
// operator appended after a "---" never took effect. It is refused,
// naming the line; a trailing empty document (a lone "---") holds
// nothing and is accepted.
func TestSecondYAMLDocumentRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := []string{"SCOUR_LIFECYCLE_ENABLED=false"}
	_, err := Load(write("two.yaml", "host: cmp1\n---\nlog: {level: debug}\nnot_a_key: 1\n"), true, env)
	if err == nil || !strings.Contains(err.Error(), "line 2: a second YAML document") || !strings.Contains(err.Error(), "two.yaml") {
		t.Fatalf("two documents: Load = %v; want refused, naming the file and line 2", err)
	}
	for name, text := range map[string]string{"one.yaml": "---\nhost: cmp1\n", "trailing.yaml": "host: cmp1\n---\n# nothing\n"} {
		if c, err := Load(write(name, text), true, env); err != nil || c.Host != "cmp1" {
			t.Errorf("%s: Load = %v; want accepted with host cmp1", name, err)
		}
	}
}
