package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/placement"
)

func TestPlacementStatusArgumentErrors(t *testing.T) {
	t.Setenv(configEnv, "")
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"placement"}, 2, "missing subcommand"},
		{[]string{"placement", "frobnicate"}, 2, `unknown command "frobnicate" for "scourctl placement"`},
		{[]string{"placement", "scan", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"placement", "unquarantine"}, 2, "needs exactly one RP-UUID or PCI address (got 0"},
		{[]string{"placement", "unquarantine", "a", "b"}, 2, "got 2 arguments"},
		{[]string{"placement", "scan", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"placement", "scan", "--config", missing}, 1, "pass --config FILE or set SCOUR_CONFIG"},
		{[]string{"placement", "unquarantine", "--config", missing, "0000:81:00.0"}, 1, "absent.yaml"},
		{[]string{"status", "now"}, 2, `unexpected argument "now"`},
		{[]string{"status", "--config", missing}, 1, "absent.yaml"},
		{[]string{"pipeline", "dry-run", "--config", missing, "--device", "81:00.0"}, 1, "absent.yaml"},
		{[]string{"records", "list", "--config", missing}, 1, "absent.yaml"},
	} {
		code, _, errs := recordsCLI(tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("scourctl %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, errs, tc.code, tc.want)
		}
	}
	code, out, _ := recordsCLI("placement", "--help")
	if code != 0 || !strings.Contains(out, "still reserved") && !strings.Contains(out, "stays reserved") {
		t.Errorf("placement --help: exit %d, output lacks the unquarantine explanation:\n%s", code, out)
	}
}

// scourctl records takes the store from scourd's config (flag or env);
// explicit store flags override it.
func TestRecordsReadScourdConfig(t *testing.T) {
	dir, newest := seedRecordsStore(t)
	cfg := writeScourYAML(t, "compute-1", dir)
	code, out, errs := recordsCLI("records", "export", "--config", cfg, "--device", "rp-nvme-0")
	if rec, err := claims.ParseRecord([]byte(out)); code != 0 || err != nil || rec.RunID != newest {
		t.Fatalf("export --config: exit %d, %v, stderr %s", code, err, errs)
	}
	// --state-path wins over the config: an empty directory has no store.
	empty := t.TempDir()
	if code, _, errs := recordsCLI("records", "export", "--config", cfg, "--state-path", empty, "--device", "rp-nvme-0"); code == 0 {
		t.Fatalf("export --config with an overriding empty --state-path succeeded; the flag was ignored (stderr %s)", errs)
	}
	// SCOUR_CONFIG names the file as --config does.
	t.Setenv(configEnv, cfg)
	code, out, errs = recordsCLI("records", "list")
	if code != 0 || !strings.Contains(out, newest) {
		t.Fatalf("records list with %s=%s: exit %d, stderr %s\n%s", configEnv, cfg, code, errs, out)
	}
	// A config that scourd would refuse is refused here too, with the reason.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("claims:\n  state_pth: /x\n"), 0o600)
	if code, _, errs := recordsCLI("records", "list", "--config", bad); code != 1 || !strings.Contains(errs, "state_pth") {
		t.Fatalf("records list with a misspelt key: exit %d, stderr %q; want 1 naming the key", code, errs)
	}
}

func TestFindDevice(t *testing.T) {
	devs := []placement.Device{
		{Ref: placement.Ref{UUID: "5f1c0000-0000-4000-8000-000000000001", Name: "cmp_0000:81:00.0", Address: "0000:81:00.0"}},
		{Ref: placement.Ref{UUID: "5f1c0000-0000-4000-8000-000000000002", Name: "cmp_0000:82:00.0", Address: "0000:82:00.0"}},
	}
	for _, tc := range []struct{ target, want string }{
		{"5f1c0000-0000-4000-8000-000000000002", "0000:82:00.0"},
		{"5F1C0000-0000-4000-8000-000000000001", "0000:81:00.0"},
		{"0000:82:00.0", "0000:82:00.0"},
		{"81:00.0", "0000:81:00.0"},
	} {
		d, err := admin.FindDevice(devs, tc.target)
		if err != nil || string(d.Address) != tc.want {
			t.Errorf("findDevice(%q) = %s, %v; want %s", tc.target, d.Address, err, tc.want)
		}
	}
	if _, err := admin.FindDevice(devs, "0000:83:00.0"); err == nil || !strings.Contains(err.Error(), "scourctl placement scan") {
		t.Errorf("findDevice of an absent device: %v; want an error pointing at scan", err)
	}
}

// The Placement credentials live in scourd's environment file (OS_* of an
// openrc, docs/operations.md): scourctl placement scan authenticates with
// them as scourd does; an OS_* of the shell (a sourced admin openrc) is
// left aside, not refused and not used.
func TestPlacementCredentialsFromEnvFile(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	var mu sync.Mutex
	var users []string
	ks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if strings.Contains(string(b), `"name":"scour-from-env-file"`) {
			users = append(users, "scour-from-env-file")
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}`)
	}))
	t.Cleanup(ks.Close)
	cfg := filepath.Join(t.TempDir(), "scour.yaml")
	os.WriteFile(cfg, []byte("host: compute-1\nclaims:\n  state_path: "+t.TempDir()+"\npipelines:\n  profiles:\n    - name: nvme\n      match: {kinds: [nvme]}\n      pipeline: {name: nvme, steps: [{name: sanitize, type: nvme-sanitize}]}\n"), 0o600)
	envFile := filepath.Join(t.TempDir(), "scourd.env")
	os.WriteFile(envFile, []byte("OS_AUTH_URL="+ks.URL+"/v3\nOS_USERNAME=scour-from-env-file\nOS_PASSWORD=pw\nOS_PROJECT_NAME=service\n"), 0o600)
	t.Setenv(configEnv, cfg)
	t.Setenv(envFileEnv, envFile)
	code, _, errs := recordsCLI("placement", "scan")
	mu.Lock()
	n := len(users)
	mu.Unlock()
	if code != exitConfig || n == 0 || strings.Contains(errs, "no credentials") || !strings.Contains(errs, "OS_USERNAME scour-from-env-file") {
		t.Fatalf("placement scan with OS_* in the env file: exit %d, %d token requests as the file's user, stderr %q", code, n, errs)
	}
	t.Setenv("OS_USERNAME", "admin-from-openrc")
	t.Setenv("OS_PASSWORD", "other")
	code, _, errs = recordsCLI("placement", "scan")
	mu.Lock()
	m := len(users)
	mu.Unlock()
	if code != exitConfig || m <= n || strings.Contains(errs, "differs") || strings.Contains(errs, "no credentials") {
		t.Fatalf("shell OS_* beside the env file: exit %d, %d more token requests as the file's user, stderr %q", code, m-n, errs)
	}
}
