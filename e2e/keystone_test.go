package e2e

import (
	"errors"
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

// newKeystoneCloud joins the shared Keystone and its Placement, or with
// dedicated starts both for t alone (with tokens that expire after exp).
func newKeystoneCloud(t *testing.T, dedicated bool, exp time.Duration) *keystoneCloud {
	t.Helper()
	var ko, po []harness.Option
	if dedicated {
		ko = append(ko, harness.Dedicated(), harness.TokenExpiration(exp))
		po = append(po, harness.Dedicated())
	}
	k := harness.StartKeystone(t, ko...)
	p := harness.StartPlacement(t, append(po, harness.BehindKeystone(k, harness.DocumentedPlacementPolicy(t)))...)
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
// middle of the clean is replaced with the un-reserve landing once. With
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

	// A whole lifecycle, the token revoked while the clean runs.
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, "0000:81:00.0")
	c.Delete(t, h, inst, harness.Versioned)
	g.Reached(t, h)
	issued := c.K.Issued()
	c.K.Revoke(t, issued[len(issued)-1])
	g.Open(t)
	c.WaitAvailable(t, h, "0000:81:00.0", 60*time.Second)
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
	cfg := h.baseConfig()
	opt(cfg)
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "scour.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(bins, "scourd"), "--config", file)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("running scourd: %v", err)
	}
	return string(out), 0
}

// A token that expires in the middle of a run, with Keystone down for
// scour at that moment: the run waits (the device stays reserved, is not
// quarantined), and once Keystone answers scourd logs in again and the
// device returns. Keystone and Placement are the test's own, with tokens
// that expire after a minute (20 s was too short on a loaded 2-CPU
// machine: the harness's own requests outlived their tokens); the test
// waits until Keystone refuses scourd's token (a condition), not for a
// time.
func TestKeystoneTokenExpiresMidRun(t *testing.T) {
	t.Parallel()
	const expiration = time.Minute
	c := newKeystoneCloud(t, true, expiration)
	name, _ := c.user(t, "scour")
	g, gateOpt := withGate(t)
	// The reconciler's scans (every 2 s) retry the un-reserve once
	// Keystone is back.
	h := c.AddHost(t, []SimDevice{{Address: "0000:81:00.0"}}, withCloud(c.cloudsYAML(t, name), name), gateOpt)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, "0000:81:00.0")
	c.Delete(t, h, inst, harness.Versioned)
	t0 := time.Now()
	g.Reached(t, h)
	t.Logf("run at the gate after %s", time.Since(t0).Round(time.Second))
	issued := c.K.Issued()
	token := issued[len(issued)-1]
	c.K.Fail(http.StatusServiceUnavailable) // Keystone down for scour; Placement still validates
	Eventually(t, expiration+time.Minute, "Keystone refuses scourd's token (expired)", func() (bool, string) {
		return !c.K.Valid(t, token), "still valid"
	})
	t.Logf("token refused after %s", time.Since(t0).Round(time.Second))
	g.Open(t)
	dev := h.Device("0000:81:00.0")
	waitLog(t, h, 60*time.Second, "Unable to re-authenticate")
	t.Logf("re-authentication failed after %s", time.Since(t0).Round(time.Second))
	Never(t, 3*time.Second, "device returned or quarantined while scour has no valid token", func() (bool, string) {
		return c.Reserved(t, dev) != 1 || c.Quarantined(t, dev), "reserved/quarantined changed"
	})
	c.K.Heal()
	c.WaitAvailable(t, h, "0000:81:00.0", 2*time.Minute)
	t.Logf("device returned after %s", time.Since(t0).Round(time.Second))
	if c.Quarantined(t, dev) {
		t.Error("device quarantined for an authentication error")
	}
	if recs := h.Records(t, "0000:81:00.0"); len(recs) != 1 {
		t.Errorf("want 1 cleaning record, got %d", len(recs))
	}
	if n := len(c.K.Issued()) - len(issued); n < 1 {
		t.Errorf("no new login after the token expired")
	}
}
