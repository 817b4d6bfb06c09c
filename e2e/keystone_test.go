package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/e2e/harness"
)

// keystoneCloud is a Cloud whose Placement sits behind a real Keystone
// (e2e/harness) with the policy docs/operations.md gives operators, its
// endpoints in a catalog region of the test's own.
type keystoneCloud struct {
	*Cloud
	K       *harness.Keystone
	Region  string
	Service string // the service project's id
}

// newKeystoneCloud joins the shared Keystone and its Placement (warmed by
// TestMain for the tests it names), or with dedicated starts both for t
// alone, at the same time (with tokens that expire after exp).
func newKeystoneCloud(t *testing.T, dedicated bool, exp time.Duration) *keystoneCloud {
	t.Helper()
	var k *harness.Keystone
	var p *harness.Placement
	if dedicated {
		k, p = harness.StartDedicatedKeystonePlacement(t, exp, harness.DocumentedPlacementPolicy(t))
	} else {
		k = harness.StartKeystone(t)
		p = harness.StartPlacement(t, harness.BehindKeystone(k, harness.DocumentedPlacementPolicy(t)))
	}
	c := &keystoneCloud{Cloud: &Cloud{Bus: harness.StartRabbitMQ(t).VHost(t), P: p}, K: k,
		Service: k.Project(t, harness.ServiceProject, harness.DefaultDomainID)}
	c.Region = p.RegisterInCatalog(t, harness.UniqueName("region"), "internal", "public")
	return c
}

// user creates a Default-domain user with roles on the service project;
// its password is "pw-"+name.
func (c *keystoneCloud) user(t *testing.T, roles ...string) (name, id string) {
	t.Helper()
	name = harness.UniqueName("scour")
	return name, c.K.User(t, name, "pw-"+name, harness.DefaultDomainID, c.Service, roles...)
}

// cloudsYAML writes a clouds.yaml with one cloud per user name (named
// after the user) and returns its path.
func (c *keystoneCloud) cloudsYAML(t *testing.T, names ...string) string {
	t.Helper()
	clouds := map[string]any{}
	for _, n := range names {
		clouds[n] = map[string]any{"region_name": c.Region, "interface": "internal", "auth": map[string]any{
			"auth_url": c.K.URL(), "username": n, "password": "pw-" + n, "user_domain_name": "Default",
			"project_name": harness.ServiceProject, "project_domain_name": "Default"}}
	}
	b, err := yaml.Marshal(map[string]any{"clouds": clouds})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "clouds.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withCloud makes scourd authenticate with Keystone as clouds.yaml cloud
// name and find Placement in the catalog, instead of the static token.
func withCloud(file, name string) HostOption {
	return func(cfg map[string]any) {
		p := cfg["placement"].(map[string]any)
		delete(p, "endpoint")
		delete(p, "token")
		p["cloud"], p["clouds_file"] = name, file
	}
}

// gatePlugin is a plugin (docs/plugins.md) whose CLEAN marks that it was
// reached and waits until the test opens the gate (SCOUR_ARG_GATE).
const gatePlugin = `#!/bin/sh
case "${SCOUR_COMMAND:-}" in
VERSION) echo '{"supported_versions":["1.0"]}'; exit 0 ;;
esac
cat >/dev/null
if [ "$SCOUR_COMMAND" = CLEAN ]; then
	touch "${SCOUR_ARG_GATE}.reached"
	while [ ! -e "${SCOUR_ARG_GATE}" ]; do sleep 0.1; done
fi
echo '{"status":"ok"}'
`

// gate is a step at the end of the NVMe pipeline that holds each run
// until Open, so a test acts while a run is in flight after its wipe and
// before its un-reserve.
type gate struct{ path string }

func withGate(t *testing.T) (*gate, HostOption) {
	t.Helper()
	g := &gate{path: filepath.Join(t.TempDir(), "open")}
	return g, withPluginStep(t, "gate", gatePlugin, map[string]any{"gate": g.path}, false)
}

// Reached waits until a run waits at the gate.
func (g *gate) Reached(t *testing.T, h *Host) {
	t.Helper()
	Eventually(t, 2*time.Minute, "a cleaning run reached the gate step", func() (bool, string) {
		_, err := os.Stat(g.path + ".reached")
		return err == nil, "scourd log tail:\n" + tail(h.Logs(), 20)
	})
}

// Close makes the next runs wait at the gate again.
func (g *gate) Close(t *testing.T) {
	t.Helper()
	for _, f := range []string{g.path, g.path + ".reached"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// Open lets the runs waiting at the gate finish.
func (g *gate) Open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(g.path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The documented role is the real minimum, end to end: scourd
// authenticated as a user with only the role scour (clouds.yaml, the
// catalog's internal endpoint) under the documented policy runs a whole
// delete -> clean -> returned lifecycle, and its token revoked in the
// middle of the clean while Keystone is down for scour (the re-login
// fails) makes the un-reserve wait for Keystone, then log in again and
// land once, without a scan (the reconcile interval is an hour). With
// only reader, the next clean keeps the device reserved (not quarantined)
// and the log names the rule refused; with the role back the device
// returns. At start, reader only and a wrong password exit 78 after one
// login.
func TestKeystoneLeastPrivilege(t *testing.T) {
	t.Parallel()
	c := newKeystoneCloud(t, false, 0)
	name, id := c.user(t, "scour")
	reader, _ := c.user(t, "reader")
	clouds := c.cloudsYAML(t, name, reader)
	g, gateOpt := withGate(t)
	h := c.AddHost(t, []SimDevice{{Address: "0000:81:00.0"}, {Address: "0000:82:00.0"}},
		WithReconcileInterval(time.Hour), withCloud(clouds, name), gateOpt)

	// A whole lifecycle, the token revoked while the clean runs and
	// Keystone down for scour (Placement still validates): the re-login
	// fails, and the un-reserve waits for Keystone instead of failing.
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, "0000:81:00.0")
	c.Delete(t, h, inst, harness.Versioned)
	g.Reached(t, h)
	issued := c.K.Issued()
	c.K.Revoke(t, issued[len(issued)-1])
	c.K.Fail(http.StatusServiceUnavailable)
	g.Open(t)
	first := h.Device("0000:81:00.0")
	waitLog(t, h, 2*time.Minute, "Keystone does not answer", "Unable to re-authenticate", first.UUID)
	Never(t, 3*time.Second, "device returned or quarantined while scour has no valid token", func() (bool, string) {
		return c.Reserved(t, first) != 1 || c.Quarantined(t, first), "reserved/quarantined changed"
	})
	c.K.Heal()
	c.WaitAvailable(t, h, "0000:81:00.0", 2*time.Minute)
	if line := findLine(h.Logs(), "could not be un-reserved", first.UUID); line != "" {
		t.Errorf("the un-reserve failed instead of waiting for Keystone: %s", line)
	}
	h.waitReturnsRecorded(t, "0000:81:00.0")
	if recs := h.Records(t, "0000:81:00.0"); len(recs) != 1 {
		t.Fatalf("want 1 cleaning record, got %d", len(recs))
	}
	if n := len(c.K.Issued()) - len(issued); n != 1 {
		t.Errorf("%d logins after the token was revoked, want 1", n)
	}
	if c.Quarantined(t, h.Device("0000:81:00.0")) {
		t.Error("device quarantined after its token was revoked")
	}
	for _, bad := range []string{"un-reserved by someone else", "may have been in the pool"} {
		if strings.Contains(h.Logs(), bad) {
			t.Errorf("scourd logged %q: the un-reserve did not land exactly once", bad)
		}
	}

	// The role shrinks to reader: removing the assignment revokes the
	// user's tokens, so scourd's next login gets a reader token.
	scourRole := c.K.Role(t, "scour")
	c.K.Grant(t, id, c.Service, "reader")
	c.K.Call(t, "", http.MethodDelete, "/v3/projects/"+c.Service+"/users/"+id+"/roles/"+scourRole, nil, nil)
	inst2 := harness.NewUUID()
	dev := h.Device("0000:82:00.0")
	c.Boot(t, h, inst2, harness.Versioned, "0000:82:00.0")
	c.Delete(t, h, inst2, harness.Versioned)
	waitLog(t, h, 60*time.Second, "Policy does not allow placement:")
	Never(t, 3*time.Second, "a device returned or quarantined while scour's role is refused", func() (bool, string) {
		r, q := c.Reserved(t, dev), c.Quarantined(t, dev)
		return r != 1 || q, "reserved/quarantined changed"
	})
	// The role back, the reader token revoked: the device returns.
	c.K.Grant(t, id, c.Service, "scour")
	issued = c.K.Issued()
	c.K.Revoke(t, issued[len(issued)-1])
	g.Open(t)
	c.WaitAvailable(t, h, "0000:82:00.0", 90*time.Second)
	if c.Quarantined(t, dev) {
		t.Error("device quarantined for an authorization error")
	}
	h.Stop(t)

	// At start: reader only, and a wrong password, exit 78 after one login.
	wrong := c.cloudsYAML(t, name)
	b, _ := os.ReadFile(wrong)
	if err := os.WriteFile(wrong, []byte(strings.ReplaceAll(string(b), "pw-"+name, "not-the-password")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, cloud, says string
	}{
		{"reader only", clouds, reader, "Policy does not allow placement:traits:update"},
		{"wrong password", wrong, name, "OS_PASSWORD"},
	} {
		before, _ := c.K.Requests()
		out, code := runScourd(t, h, withCloud(tc.file, tc.cloud))
		if code != 78 || !strings.Contains(out, tc.says) {
			t.Errorf("%s: scourd exited %d, want 78 with a log naming %q:\n%s", tc.name, code, tc.says, tail(out, 10))
		}
		if after, _ := c.K.Requests(); after-before != 1 {
			t.Errorf("%s: %d requests to Keystone, want 1 login", tc.name, after-before)
		}
	}
}

// runScourd runs scourd once with h's configuration changed by opt and
// returns its output and exit status (it must exit on its own).
func runScourd(t *testing.T, h *Host, opt HostOption) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(bins, "scourd"), "--config", configVariant(t, h, opt))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	return exitStatus(t, cmd)
}

// configVariant writes h's configuration changed by opts to a file of the
// test's own and returns its path.
func configVariant(t *testing.T, h *Host, opts ...HostOption) string {
	t.Helper()
	cfg := h.baseConfig()
	for _, o := range opts {
		o(cfg)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "scour.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// exitStatus runs cmd and returns its output and exit status.
func exitStatus(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("running %s: %v", cmd.Path, err)
	}
	return string(out), 0
}

// Keystone stopped in the middle of a run, scourd's token no longer
// valid (revoked: Placement refuses it as it refuses an expired one) once
// Keystone is back: the run's un-reserve waits for Keystone (Placement
// cannot validate any token meanwhile), the device stays reserved and is
// not quarantined, and once Keystone answers scourd logs in again and the
// device returns from the run itself: the reconciler's scans
// (lifecycle.reconcile_interval) and the device backoff
// (lifecycle.backoff_base) are an hour here, so no scan returns it.
// Keystone and Placement are the test's own (Stop/Start).
// TestKeystoneLeastPrivilege covers Keystone down for scour only (its
// re-login failing while Placement still validates).
func TestKeystoneDownMidRun(t *testing.T) {
	t.Parallel()
	c := newKeystoneCloud(t, true, harness.DefaultTokenExpiration)
	name, _ := c.user(t, "scour")
	g, gateOpt := withGate(t)
	h := c.AddHost(t, []SimDevice{{Address: "0000:81:00.0"}}, withCloud(c.cloudsYAML(t, name), name), gateOpt,
		WithReconcileInterval(time.Hour), withBackoff(time.Hour))
	t0 := time.Now()
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, "0000:81:00.0")
	c.Delete(t, h, inst, harness.Versioned)
	g.Reached(t, h)
	t.Logf("the run at the gate after %s", time.Since(t0).Round(time.Second))
	dev := h.Device("0000:81:00.0")
	issued := c.K.Issued()
	c.K.Revoke(t, issued[len(issued)-1])
	c.K.Stop(t)
	g.Open(t)
	waitLog(t, h, 3*time.Minute, "Keystone does not answer", dev.UUID)
	t.Logf("the un-reserve waits for Keystone after %s", time.Since(t0).Round(time.Second))
	c.K.Start(t)
	t.Logf("Keystone answers again after %s", time.Since(t0).Round(time.Second))
	c.WaitAvailable(t, h, "0000:81:00.0", 2*time.Minute)
	t.Logf("the device returned after %s", time.Since(t0).Round(time.Second))
	if c.Quarantined(t, dev) {
		t.Error("device quarantined for an authentication error")
	}
	if recs := h.Records(t, "0000:81:00.0"); len(recs) != 1 {
		t.Errorf("want 1 cleaning record, got %d", len(recs))
	}
	if n := len(c.K.Issued()) - len(issued); n < 1 {
		t.Error("no new login after the token was revoked")
	}
	// The old way: the un-reserve failed, and the device waited for a scan.
	if strings.Contains(h.Logs(), "could not be un-reserved") {
		t.Errorf("an un-reserve failed instead of waiting for Keystone:\n%s", tail(h.Logs(), 20))
	}
}

// withBackoff sets lifecycle.backoff_base and backoff_max (a device's wait
// after a failed run or un-reserve before a scan retries it).
func withBackoff(d time.Duration) HostOption {
	return func(cfg map[string]any) {
		l := cfg["lifecycle"].(map[string]any)
		l["backoff_base"], l["backoff_max"] = d.String(), d.String()
	}
}

// withOSCredentials makes placement take its credentials from the OS_*
// variables (no endpoint, token or cloud) and find Placement in the
// catalog at iface in region.
func withOSCredentials(region, iface string) HostOption {
	return func(cfg map[string]any) {
		p := cfg["placement"].(map[string]any)
		for _, k := range []string{"endpoint", "token", "cloud", "clouds_file"} {
			delete(p, k)
		}
		p["region"], p["interface"] = region, iface
	}
}

// runScourctl runs the scourctl binary with h's configuration changed by
// opts, in a shell whose environment is only PATH plus env after sourcing
// openrc (when not empty), as an operator does, and returns its output
// and exit status.
func runScourctl(t *testing.T, h *Host, openrc string, env []string, args []string, opts ...HostOption) (string, int) {
	t.Helper()
	script := `exec "$0" "$@"`
	if openrc != "" {
		script = ". " + openrc + ` && exec "$0" "$@"`
	}
	cmd := exec.CommandContext(t.Context(), "sh", append([]string{"-c", script, filepath.Join(bins, "scourctl")}, append(args, "--config", configVariant(t, h, opts...))...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	return exitStatus(t, cmd)
}

// writeOpenrc writes an openrc (export OS_...=...) and returns its path.
func writeOpenrc(t *testing.T, vars map[string]string) string {
	t.Helper()
	var b strings.Builder
	for k, v := range vars {
		fmt.Fprintf(&b, "export %s=%q\n", k, v)
	}
	path := filepath.Join(t.TempDir(), "openrc")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// scourctl authenticates as scourd does (the same client): the real
// binary, against Placement behind the shared Keystone with the
// documented policy, with each credential form it documents (an openrc
// sourced into the shell with domain names and with ids, application
// credentials by id and by name, clouds.yaml with a named cloud, scourd's
// environment file, OS_TOKEN), finds Placement in the catalog by
// interface and region (or at placement.endpoint, the catalog not
// consulted), and exits 78 naming the setting or rule when Keystone
// refuses the password or Placement's policy refuses a reader.
func TestKeystoneScourctl(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/etc/scour/scourd.env"); err == nil {
		t.Fatal("/etc/scour/scourd.env exists on this machine: scourctl would read its OS_* instead of the test's")
	}
	c := newKeystoneCloud(t, false, 0)
	domainName := harness.UniqueName("users")
	domain := c.K.Domain(t, domainName)
	name := harness.UniqueName("scour")
	pw := "pw-" + name
	id := c.K.User(t, name, pw, domain, c.Service, "scour")
	reader, _ := c.user(t, "reader")
	acID, acSecret := c.K.AppCredential(t, harness.Credentials{UserID: id, Password: pw, ProjectID: c.Service}, id, "scourctl-ac", time.Time{})
	token := func() string { // a token of its own for each use: they expire after 3 minutes
		tok, _, err := c.K.Authenticate(t.Context(), harness.Credentials{UserID: id, Password: pw, ProjectID: c.Service})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	revoked := token()
	c.K.Revoke(t, revoked)
	clouds := c.cloudsYAML(t, reader)
	// The user of the test's domain in clouds.yaml, under a cloud name of its own.
	named := filepath.Join(t.TempDir(), "clouds.yaml")
	if err := os.WriteFile(named, []byte(`clouds:
  scour-prod:
    region_name: `+c.Region+`
    interface: internal
    auth:
      auth_url: `+c.K.URL()+`
      username: `+name+`
      password: `+pw+`
      user_domain_name: `+domainName+`
      project_name: service
      project_domain_name: Default
`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A region whose Placement has only an internal endpoint, and one
	// with no Placement at all.
	internalOnly := harness.UniqueName("region")
	c.K.RegisterService(t, "placement", "placement", harness.Endpoint{Interface: "internal", Region: internalOnly, URL: strings.TrimRight(c.P.URL(), "/")})
	empty := harness.UniqueName("region")
	c.K.RegisterService(t, "identity-extra", "other", harness.Endpoint{Interface: "internal", Region: empty, URL: "http://127.0.0.1:9/"})
	h := c.AddHost(t, []SimDevice{{Address: "0000:81:00.0"}}, withCloud(named, "scour-prod"))
	// Only h's configuration and compute node are used: without scourd,
	// every login through the test's Keystone URL is scourctl's.
	h.Stop(t)

	password := map[string]string{"OS_AUTH_URL": c.K.URL(), "OS_USERNAME": name, "OS_PASSWORD": pw,
		"OS_USER_DOMAIN_NAME": domainName, "OS_PROJECT_NAME": harness.ServiceProject, "OS_PROJECT_DOMAIN_NAME": "Default"}
	ids := map[string]string{"OS_AUTH_URL": c.K.URL(), "OS_USERNAME": name, "OS_PASSWORD": pw,
		"OS_USER_DOMAIN_ID": domain, "OS_PROJECT_NAME": harness.ServiceProject, "OS_PROJECT_DOMAIN_ID": harness.DefaultDomainID}
	envFile := filepath.Join(t.TempDir(), "scourd.env")
	if err := os.WriteFile(envFile, []byte("# scourd's EnvironmentFile\nOS_AUTH_URL="+c.K.URL()+"\nOS_APPLICATION_CREDENTIAL_ID="+acID+
		"\nOS_APPLICATION_CREDENTIAL_SECRET='"+acSecret+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	scan := []string{"placement", "scan"}
	osCreds := withOSCredentials(c.Region, "internal")
	for _, tc := range []struct {
		name   string
		openrc map[string]string
		env    []string
		args   []string
		opt    HostOption
	}{
		{name: "openrc sourced, password, domain names", openrc: password, opt: osCreds},
		{name: "openrc sourced, password, domain ids", openrc: ids, opt: osCreds},
		{name: "application credential by id", env: []string{"OS_AUTH_URL=" + c.K.URL(), "OS_APPLICATION_CREDENTIAL_ID=" + acID,
			"OS_APPLICATION_CREDENTIAL_SECRET=" + acSecret}, opt: osCreds},
		{name: "application credential by name", env: []string{"OS_AUTH_URL=" + c.K.URL(), "OS_APPLICATION_CREDENTIAL_NAME=scourctl-ac",
			"OS_APPLICATION_CREDENTIAL_SECRET=" + acSecret, "OS_USERNAME=" + name, "OS_USER_DOMAIN_NAME=" + domainName}, opt: osCreds},
		{name: "clouds.yaml, named cloud (placement.cloud)", opt: withCloud(named, "scour-prod")},
		{name: "clouds.yaml, OS_CLOUD", env: []string{"OS_CLOUD=scour-prod", "OS_CLIENT_CONFIG_FILE=" + named}, opt: osCreds},
		{name: "scourd's environment file", args: []string{"--env-file", envFile}, opt: osCreds},
		{name: "OS_TOKEN", env: []string{"OS_AUTH_URL=" + c.K.URL(), "OS_PROJECT_ID=" + c.Service}, opt: osCreds},
		{name: "interface public of the region", openrc: password, opt: withOSCredentials(c.Region, "public")},
		{name: "placement.endpoint, the catalog not consulted", openrc: password, opt: func(cfg map[string]any) {
			osCreds(cfg)
			p := cfg["placement"].(map[string]any)
			p["region"], p["endpoint"] = empty, c.P.URL()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(c.K.Issued())
			var rc string
			if tc.openrc != nil {
				rc = writeOpenrc(t, tc.openrc)
			}
			env := tc.env
			if tc.name == "OS_TOKEN" {
				env = append(env, "OS_TOKEN="+token())
			}
			out, code := runScourctl(t, h, rc, env, append(append([]string{}, scan...), tc.args...), tc.opt)
			if code != 0 || !strings.Contains(out, "compute node "+h.Name) || !strings.Contains(out, "0000:81:00.0") {
				t.Fatalf("scourctl placement scan exited %d, want 0 listing %s's device:\n%s", code, h.Name, out)
			}
			if n := len(c.K.Issued()) - before; n != 1 {
				t.Errorf("Keystone issued %d tokens through scour's auth URL, want 1", n)
			}
		})
	}

	// The catalog decides: an interface the region lacks, a region without
	// Placement. Both name what the catalog holds; exit 1 (no refusal).
	for _, tc := range []struct {
		name string
		opt  HostOption
		says []string
	}{
		{"interface public where the region has only internal", withOSCredentials(internalOnly, "public"),
			[]string{`interface "public"`, "only: internal in region " + internalOnly}},
		{"a region without Placement", withOSCredentials(empty, "internal"),
			[]string{`no endpoint in region "` + empty + `"`, c.Region}},
	} {
		out, code := runScourctl(t, h, writeOpenrc(t, password), nil, scan, tc.opt)
		if code != 1 || !containsAll(out, tc.says...) {
			t.Errorf("%s: scourctl exited %d, want 1 naming %q:\n%s", tc.name, code, tc.says, out)
		}
	}

	// Refusals: exit 78, naming the credential field or the policy rule,
	// after one login, the secret not shown.
	wrong := maps.Clone(password)
	wrong["OS_PASSWORD"] = "not-the-password"
	for _, tc := range []struct {
		name   string
		openrc map[string]string
		env    []string
		opt    HostOption
		says   []string
	}{
		{"wrong password", wrong, nil, osCreds, []string{"HTTP 401", "OS_PASSWORD", "OS_USERNAME " + name}},
		{"revoked OS_TOKEN", nil, []string{"OS_AUTH_URL=" + c.K.URL(), "OS_TOKEN=" + revoked, "OS_PROJECT_ID=" + c.Service}, osCreds,
			[]string{"HTTP 404", "OS_TOKEN", "expired or been revoked"}},
		{"reader only", nil, nil, withCloud(clouds, reader), []string{"HTTP 403", "Policy does not allow placement:traits:update"}},
	} {
		var rc string
		if tc.openrc != nil {
			rc = writeOpenrc(t, tc.openrc)
		}
		before, _ := c.K.Requests()
		out, code := runScourctl(t, h, rc, tc.env, scan, tc.opt)
		if code != 78 || !containsAll(out, tc.says...) {
			t.Errorf("%s: scourctl exited %d, want 78 naming %q:\n%s", tc.name, code, tc.says, out)
		}
		if strings.Contains(out, "not-the-password") || strings.Contains(out, pw) || strings.Contains(out, revoked) {
			t.Errorf("%s: scourctl shows a secret:\n%s", tc.name, out)
		}
		if after, _ := c.K.Requests(); after-before != 1 {
			t.Errorf("%s: %d requests to Keystone, want 1 login", tc.name, after-before)
		}
	}
}
