package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

func TestRunVersionAndUnknown(t *testing.T) {
	for _, arg := range []string{"--version", "-v", "version"} {
		code, out, errs := recordsCLI(arg)
		if code != 0 || !strings.HasPrefix(out, "scourctl ") {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", arg, code, out, errs)
		}
	}
	code, _, errs := recordsCLI("bogus")
	if code != 2 || !strings.Contains(errs, `unknown command "bogus"`) {
		t.Fatalf("unknown command: exit %d (want 2), stderr %q", code, errs)
	}
	if code, _, errs := recordsCLI(); code != 2 || !strings.Contains(errs, "missing command") {
		t.Fatalf("no command: exit %d (want 2), stderr %q", code, errs)
	}
}

// Every command answers -h and --help on stdout with exit status 0.
func TestHelpExitsZeroEverywhere(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(newRoot(nil, nil).root, nil)
	if len(paths) < 15 {
		t.Fatalf("only %d commands found: %v", len(paths), paths)
	}
	for _, p := range paths {
		for _, h := range []string{"-h", "--help"} {
			code, out, errs := recordsCLI(append(append([]string{}, p...), h)...)
			if code != 0 || !strings.Contains(out, "Usage:") || errs != "" {
				t.Errorf("scourctl %s %s: exit %d, stderr %q, stdout:\n%s", strings.Join(p, " "), h, code, errs, out)
			}
		}
	}
	if code, out, _ := recordsCLI("help", "records", "list"); code != 0 || !strings.Contains(out, "--limit") {
		t.Errorf("help records list: exit %d\n%s", code, out)
	}
}

// Flags may follow positional arguments (as with every cobra CLI).
func TestFlagsAfterArguments(t *testing.T) {
	t.Setenv(configEnv, "")
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	for _, cmd := range [][]string{{"placement", "unquarantine"}, {"unquarantine"}} {
		code, _, errs := recordsCLI(append(cmd, "0000:81:00.0", "--config", missing)...)
		if code != 1 || !strings.Contains(errs, "absent.yaml") {
			t.Fatalf("%v ADDRESS --config: exit %d, stderr %q; want the config to be read (exit 1 naming it)", cmd, code, errs)
		}
	}
	dir, newest := seedRecordsStore(t)
	code, out, errs := recordsCLI("records", "show", newest, "--state-path", dir, "-o", "json")
	if code != 0 || !strings.Contains(out, `"run_id": "`+newest) {
		t.Fatalf("records show RUN --state-path DIR -o json: exit %d, stderr %q\n%s", code, errs, out)
	}
}

func TestListingFormatsAndColumns(t *testing.T) {
	dir, newest := seedRecordsStore(t)
	list := func(args ...string) (int, string, string) {
		return recordsCLI(append([]string{"records", "list", "--state-path", dir}, args...)...)
	}
	code, out, errs := list("-o", "json")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 3 || rows[0]["run"] != newest && rows[1]["run"] != newest {
		t.Fatalf("-o json: exit %d, stderr %q\n%s", code, errs, out)
	}
	if !strings.HasPrefix(strings.TrimSpace(out[strings.Index(out, "{")+1:]), `"run"`) {
		t.Errorf("-o json: columns out of order:\n%s", out)
	}
	code, out, _ = list("-o", "yaml", "-c", "run,state")
	var yrows []map[string]string
	if code != 0 || yaml.Unmarshal([]byte(out), &yrows) != nil || len(yrows) != 3 || len(yrows[0]) != 2 || yrows[0]["state"] == "" {
		t.Fatalf("-o yaml -c run,state: exit %d\n%s", code, out)
	}
	code, out, _ = list("-f", "value", "-c", "state", "-c", "address", "--state", "running") // -f: the openstack CLI's name
	if code != 0 || out != "running 0000:82:00.0\n" {
		t.Fatalf("-o value -c state -c address: exit %d, %q", code, out)
	}
	code, out, _ = list("-c", "RUN", "-c", "Device RP")
	if code != 0 || !strings.HasPrefix(out, "RUN") || !strings.Contains(out, "DEVICE RP") || strings.Contains(out, "PIPELINE") {
		t.Fatalf("table -c RUN -c 'Device RP': exit %d\n%s", code, out)
	}
	if code, _, errs := list("-c", "colour"); code != 2 || !strings.Contains(errs, "no such column") || !strings.Contains(errs, "device_rp") {
		t.Fatalf("-c colour: exit %d, %q", code, errs)
	}
	if code, _, errs := list("-o", "xml"); code != 2 || !strings.Contains(errs, "json, yaml") {
		t.Fatalf("-o xml: exit %d, %q", code, errs)
	}
	code, out, _ = recordsCLI("records", "show", newest, "--state-path", dir, "-o", "yaml")
	if code != 0 || !strings.Contains(out, "run_id: "+newest) {
		t.Fatalf("show -o yaml: exit %d\n%s", code, out)
	}
}

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_scourctl", "zsh": "#compdef scourctl", "fish": "complete -c scourctl",
	} {
		code, out, errs := recordsCLI("completion", shell)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, output lacks %q", shell, code, errs, want)
		}
	}
	// Dynamic completion of -o's values.
	code, out, _ := recordsCLI("__complete", "records", "list", "-o", "")
	if code != 0 || !strings.Contains(out, "yaml") {
		t.Errorf("completing -o: exit %d\n%s", code, out)
	}
}

// scourctl reads the store scourd reads: with scourd's environment file
// present, a SCOUR_* setting of the shell that scourd does not have is
// refused, naming it; the file's own settings apply.
func TestEnvFileMismatchIsRefused(t *testing.T) {
	dir, newest := seedRecordsStore(t)
	cfg := filepath.Join(t.TempDir(), "scour.yaml")
	os.WriteFile(cfg, []byte("host: compute-1\npipelines:\n  profiles:\n    - name: nvme\n      match: {kinds: [nvme]}\n      pipeline: {name: nvme, steps: [{name: sanitize, type: nvme-sanitize}]}\n"), 0o600)
	envFile := filepath.Join(t.TempDir(), "scourd.env")
	os.WriteFile(envFile, []byte("# scourd's overrides\nSCOUR_CLAIMS_STATE_PATH="+dir+"\nSCOUR_BUS_URL='rabbit://u:p@h:5672/'\n"), 0o600)
	t.Setenv(configEnv, cfg)
	t.Setenv(envFileEnv, envFile)
	code, out, errs := recordsCLI("records", "list", "-o", "value", "-c", "run")
	if code != 0 || !strings.Contains(out, newest) {
		t.Fatalf("store from the env file: exit %d, stderr %q\n%s", code, errs, out)
	}
	other := t.TempDir()
	t.Setenv("SCOUR_CLAIMS_STATE_PATH", other)
	code, _, errs = recordsCLI("records", "list")
	if code != 1 || !strings.Contains(errs, "SCOUR_CLAIMS_STATE_PATH (claims.state_path) differs from its value in "+envFile) {
		t.Fatalf("differing SCOUR_CLAIMS_STATE_PATH: exit %d, stderr %q", code, errs)
	}
	t.Setenv("SCOUR_CLAIMS_STATE_PATH", dir)
	t.Setenv("SCOUR_CLAIMS_DRIVER", "postgres")
	code, _, errs = recordsCLI("records", "list")
	if code != 1 || !strings.Contains(errs, "SCOUR_CLAIMS_DRIVER (claims.driver) is set in your environment but not in "+envFile) {
		t.Fatalf("SCOUR_CLAIMS_DRIVER only in the shell: exit %d, stderr %q", code, errs)
	}
	// The same values as scourd's are fine.
	os.Unsetenv("SCOUR_CLAIMS_DRIVER")
	if code, _, errs := recordsCLI("records", "list"); code != 0 {
		t.Fatalf("shell agreeing with the env file: exit %d, %q", code, errs)
	}
	// An env file named explicitly must exist.
	t.Setenv(envFileEnv, filepath.Join(t.TempDir(), "none.env"))
	if code, _, errs := recordsCLI("records", "list"); code != 1 || !strings.Contains(errs, "none.env") {
		t.Fatalf("missing explicit env file: exit %d, %q", code, errs)
	}
}
