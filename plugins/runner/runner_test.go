package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/internal/testkit"
	"github.com/scour-project/scour/plugins"
)

// writePlugin puts a shell script plugin into dir, root-owned, mode 0755.
func writePlugin(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755); err != nil { // umask-proof
		t.Fatal(err)
	}
	return p
}

func newRunner(t *testing.T, dir string, mod func(*Config)) *Runner {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("plugin ownership rules need root-owned files: run the tests as root")
	}
	cfg := Config{Dirs: []string{dir}, KillGrace: 500 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testRequest() *plugins.Request {
	return &plugins.Request{
		Step:             "wipe",
		Device:           plugins.Device{Address: "0000:81:00.0", Kind: "nvme", VendorID: "0x144d", DeviceID: "0xa80a", Media: []plugins.Media{{Path: "/tmp/a", Size: 10}, {Path: "/tmp/b", Size: 20}}},
		ResourceProvider: plugins.ResourceProvider{UUID: "rp-1"},
		Previous:         &plugins.Previous{Instance: "inst-1", Project: "proj-1"},
		Args:             map[string]any{"pattern": "zero", "passes": 2.0, "bad name": "x"},
	}
}

func codeOf(t *testing.T, err error) int {
	t.Helper()
	var pe *plugins.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *plugins.Error", err, err)
	}
	return pe.Code
}

func TestProtocolRoundTripAndEnvironment(t *testing.T) {
	t.Setenv("SCOUR_LEAK_TEST", "must-not-reach-plugin")
	dir := t.TempDir()
	// The plugin echoes its environment and stdin back as details.
	p := writePlugin(t, dir, "echo", `
case "$SCOUR_COMMAND" in
VERSION) echo '{"supported_versions":["0.9","1.0"]}'; exit 0;;
esac
env | sort > "$(dirname "$0")/env.$SCOUR_COMMAND"
printf '%s' "$SCOUR_MEDIA" > "$(dirname "$0")/media"
cat > "$(dirname "$0")/stdin.$SCOUR_COMMAND"
echo '{"progress":0.25}'
echo '{"progress":0.5,"message":"half"}'
echo "some log" >&2
echo '{"status":"ok","details":{"wiped":2}}'
`)
	r := newRunner(t, dir, nil)
	ctx := context.Background()
	v, err := r.Version(ctx, p)
	if err != nil || v != "1.0" {
		t.Fatalf("Version = %q, %v; want 1.0", v, err)
	}
	var got []float64
	res, err := r.Clean(ctx, p, v, testRequest(), func(f float64) { got = append(got, f) })
	if err != nil {
		t.Fatalf("Clean: %v", err)
	}
	if res.Status != "ok" || res.Details["wiped"] != 2.0 || !strings.Contains(res.Stderr, "some log") {
		t.Fatalf("result %+v", res)
	}
	if len(got) != 2 || got[0] != 0.25 || got[1] != 0.5 {
		t.Fatalf("progress %v, want [0.25 0.5]", got)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env.CLEAN"))
	for _, want := range []string{
		"SCOUR_COMMAND=CLEAN", "SCOUR_PCI_ADDRESS=0000:81:00.0", "SCOUR_RP_UUID=rp-1",
		"SCOUR_STEP=wipe", "SCOUR_PROTOCOL_VERSION=1.0", "PATH=" + MinimalPath,
		"SCOUR_ARG_PATTERN=zero", "SCOUR_ARG_PASSES=2",
	} {
		if !strings.Contains(string(env), want) {
			t.Errorf("plugin environment lacks %q:\n%s", want, env)
		}
	}
	for _, bad := range []string{"SCOUR_LEAK_TEST", "HOME=", "SCOUR_ARG_BAD"} {
		if strings.Contains(string(env), bad) {
			t.Errorf("plugin environment has %q:\n%s", bad, env)
		}
	}
	if media, _ := os.ReadFile(filepath.Join(dir, "media")); string(media) != "/tmp/a\n/tmp/b" {
		t.Errorf("SCOUR_MEDIA = %q, want the media paths one per line", media)
	}
	stdin, _ := os.ReadFile(filepath.Join(dir, "stdin.CLEAN"))
	for _, want := range []string{`"protocol_version":"1.0"`, `"address":"0000:81:00.0"`, `"uuid":"rp-1"`, `"instance":"inst-1"`, `"pattern":"zero"`} {
		if !strings.Contains(string(stdin), want) {
			t.Errorf("stdin lacks %s: %s", want, stdin)
		}
	}
}

func TestOutputFailures(t *testing.T) {
	tests := []struct {
		name, body string
		code       int
		msg        string
	}{
		{"bad json", `echo '{"status": "ok",'; exit 0`, plugins.CodeProtocol, "not a sequence of JSON"},
		{"not an object", `echo '[1,2]'`, plugins.CodeProtocol, "not an object"},
		{"exit 0 nothing", `exit 0`, plugins.CodeProtocol, "without a result"},
		{"nonzero no json", `echo "dd: failed" >&2; exit 3`, plugins.CodeProtocol, "exited with status 3 without printing an error"},
		{"nonzero garbage", `echo "oops"; exit 1`, plugins.CodeProtocol, "exited with status 1 and printed no valid JSON"},
		{"error object", `echo '{"code":13,"msg":"worn out","details":{"percent_used":99}}'; exit 1`, plugins.CodeRetire, "worn out"},
		{"plugin code", `echo '{"code":142,"msg":"vendor thing"}'; exit 1`, 142, "vendor thing"},
		{"zero code", `echo '{"code":0,"msg":"x"}'; exit 1`, plugins.CodeProtocol, "no valid positive code"},
		{"bad status", `echo '{"status":"maybe"}'`, plugins.CodeProtocol, `status "maybe"`},
		{"success with failure exit", `echo '{"status":"ok"}'; exit 2`, plugins.CodeProtocol, "non-error object"},
		{"huge output", `while :; do echo '{"progress":0.1,"message":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'; done`, plugins.CodeProtocol, "more than 4096 bytes"},
	}
	dir := t.TempDir()
	r := newRunner(t, dir, func(c *Config) { c.MaxStdout = 4096 })
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writePlugin(t, dir, "p"+strconv.Itoa(i), tc.body)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := r.Clean(ctx, p, "1.0", testRequest(), nil)
			if err == nil {
				t.Fatal("Clean succeeded")
			}
			if c := codeOf(t, err); c != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v (code %d); want code %d containing %q", err, c, tc.code, tc.msg)
			}
		})
	}
}

func TestStderrIsBoundedAndKept(t *testing.T) {
	dir := t.TempDir()
	r := newRunner(t, dir, func(c *Config) { c.MaxStderr = 100 })
	p := writePlugin(t, dir, "noisy", `i=0; while [ $i -lt 2000 ]; do echo "line $i" >&2; i=$((i+1)); done; echo '{"code":12,"msg":"broken"}'; exit 1`)
	_, err := r.Clean(context.Background(), p, "1.0", testRequest(), nil)
	var pe *plugins.Error
	if !errors.As(err, &pe) || pe.Code != 12 {
		t.Fatalf("err %v", err)
	}
	if !strings.HasPrefix(pe.Stderr, "line 0\n") || !strings.HasSuffix(pe.Stderr, "[stderr truncated]") || len(pe.Stderr) > 100+len("\n[stderr truncated]") {
		t.Fatalf("stderr (%d bytes) %.300q", len(pe.Stderr), pe.Stderr)
	}
}

func TestWrongVersionRefused(t *testing.T) {
	dir := t.TempDir()
	r := newRunner(t, dir, nil)
	p := writePlugin(t, dir, "old", `echo '{"supported_versions":["0.1","0.2"]}'`)
	_, err := r.Version(context.Background(), p)
	if c := codeOf(t, err); c != plugins.CodeIncompatibleVersion || !strings.Contains(err.Error(), "no common protocol version") {
		t.Fatalf("err %v", err)
	}
}

// A plugin that sleeps forever after spawning a child is killed with the
// child when its deadline passes.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	r := newRunner(t, dir, nil)
	pidFile := filepath.Join(dir, "child.pid")
	p := writePlugin(t, dir, "sleeper", `sleep 1000 & echo $! > `+pidFile+`
sleep 1000`)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.Clean(ctx, p, "1.0", testRequest(), nil)
	if c := codeOf(t, err); c != plugins.CodeTimeout {
		t.Fatalf("err %v, want timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Clean returned after %v", d)
	}
	testkit.WaitGone(t, pidFile, 3*time.Second) // the timed-out plugin's child
}

func TestPermissionsRefused(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	r := newRunner(t, dir, nil)
	ok := writePlugin(t, dir, "ok", `echo '{"supported_versions":["1.0"]}'`)
	if _, err := r.Version(context.Background(), ok); err != nil {
		t.Fatalf("well-formed plugin refused: %v", err)
	}
	groupW := writePlugin(t, dir, "groupw", `exit 0`)
	os.Chmod(groupW, 0o775)
	worldW := writePlugin(t, dir, "worldw", `exit 0`)
	os.Chmod(worldW, 0o757)
	notExec := writePlugin(t, dir, "noexec", `exit 0`)
	os.Chmod(notExec, 0o644)
	nobody := writePlugin(t, dir, "nobody", `exit 0`)
	if err := os.Chown(nobody, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	outside := writePlugin(t, other, "outside", `exit 0`)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	nested := writePlugin(t, sub, "nested", `exit 0`)
	os.Mkdir(filepath.Join(dir, "adir"), 0o755)

	tests := []struct{ path, want string }{
		{groupW, "writable by group or others"},
		{worldW, "writable by group or others"},
		{notExec, "not executable"},
		{nobody, "owned by uid 65534, not root"},
		{outside, "outside the configured plugin directories"},
		{link, "is a symlink"},
		{nested, "outside the configured plugin directories"},
		{"relative/plugin", "must be absolute"},
		{filepath.Join(dir, "adir"), "not a regular file"},
	}
	for _, tc := range tests {
		_, err := r.Clean(context.Background(), tc.path, "1.0", testRequest(), nil)
		if err == nil || codeOf(t, err) != plugins.CodeInvalidConfig || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want code 3 containing %q", tc.path, err, tc.want)
		}
	}
	// A group-writable plugin directory taints everything in it.
	os.Chmod(dir, 0o775)
	defer os.Chmod(dir, 0o700)
	if _, err := r.Version(context.Background(), ok); err == nil || !strings.Contains(err.Error(), "plugin directory") {
		t.Errorf("plugin in group-writable dir: err %v", err)
	}
}

// Children a plugin leaves behind when it exits are killed with its group,
// and do not hold scour up although they keep stdout open.
func TestLeftoverChildrenKilledOnExit(t *testing.T) {
	dir := t.TempDir()
	r := newRunner(t, dir, nil)
	pidFile := filepath.Join(dir, "child.pid")
	p := writePlugin(t, dir, "leaver", `sleep 1000 & echo $! > `+pidFile+`
echo '{"status":"ok"}'`)
	start := time.Now()
	if _, err := r.Clean(context.Background(), p, "1.0", testRequest(), nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Clean took %v", d)
	}
	testkit.WaitGone(t, pidFile, 3*time.Second) // the plugin's child must not outlive it
}

// TestStartFailureIsConfigProblem: a plugin that cannot start (its #!
// interpreter is missing) is a deployment problem (code 3, retried by the
// engine), not a permanent device failure (12, quarantine).
func TestStartFailureIsConfigProblem(t *testing.T) {
	dir := t.TempDir()
	r := newRunner(t, dir, nil)
	p := filepath.Join(dir, "badinterp")
	if err := os.WriteFile(p, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o755)
	_, err := r.Clean(context.Background(), p, "1.0", testRequest(), nil)
	if err == nil || codeOf(t, err) != plugins.CodeInvalidConfig || !strings.Contains(err.Error(), p) {
		t.Fatalf("err %v, want code 3 naming %s", err, p)
	}
}

// TestSymlinksAndAncestorsRefused: the runner executes exactly the path it
// checked, so that path must be its own real path (a symlink, even to a
// good plugin in the same directory, could be re-pointed between check
// and exec), and every directory above the plugin directory must be
// root-owned and not group/world-writable unless sticky and root-owned
// (like /tmp), as sudo requires.
func TestSymlinksAndAncestorsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plugin ownership rules need root-owned files: run the tests as root")
	}
	version := `echo '{"supported_versions":["1.0"]}'`
	// tree makes base/<parent>/plugins with a good plugin "p" and returns
	// the plugin directory after mod has been applied to the parent.
	tree := func(t *testing.T, mod func(parent string)) string {
		parent := filepath.Join(t.TempDir(), "parent")
		dir := filepath.Join(parent, "plugins")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(parent, 0o755)
		os.Chmod(dir, 0o755)
		writePlugin(t, dir, "p", version)
		if mod != nil {
			mod(parent)
		}
		return dir
	}
	chmod := func(m os.FileMode) func(string) { return func(d string) { os.Chmod(d, m) } }
	nobody := func(m os.FileMode) func(string) {
		return func(d string) {
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			os.Chmod(d, m)
		}
	}
	tests := []struct {
		name string
		// setup returns the configured plugin dir and plugin path.
		setup func(t *testing.T) (dir, path string)
		want  string // "" means accepted
	}{
		{name: "plain tree", setup: func(t *testing.T) (string, string) { d := tree(t, nil); return d, filepath.Join(d, "p") }},
		{name: "root-owned sticky world-writable parent (like /tmp)", setup: func(t *testing.T) (string, string) {
			d := tree(t, chmod(0o777|os.ModeSticky))
			return d, filepath.Join(d, "p")
		}},
		{name: "world-writable parent", want: "without the sticky bit", setup: func(t *testing.T) (string, string) {
			d := tree(t, chmod(0o777))
			return d, filepath.Join(d, "p")
		}},
		{name: "group-writable parent", want: "writable by group or others", setup: func(t *testing.T) (string, string) {
			d := tree(t, chmod(0o775))
			return d, filepath.Join(d, "p")
		}},
		{name: "parent owned by nobody", want: "owned by uid 65534", setup: func(t *testing.T) (string, string) {
			d := tree(t, nobody(0o755))
			return d, filepath.Join(d, "p")
		}},
		{name: "sticky parent owned by nobody", want: "owned by uid 65534", setup: func(t *testing.T) (string, string) {
			d := tree(t, nobody(0o777|os.ModeSticky))
			return d, filepath.Join(d, "p")
		}},
		{name: "symlink to a good plugin in the same dir", want: "is a symlink", setup: func(t *testing.T) (string, string) {
			d := tree(t, nil)
			link := filepath.Join(d, "link")
			if err := os.Symlink(filepath.Join(d, "p"), link); err != nil {
				t.Fatal(err)
			}
			return d, link
		}},
		{name: "plugin dir reached through a symlinked parent", want: "is a symlink", setup: func(t *testing.T) (string, string) {
			d := tree(t, nil)
			alias := filepath.Join(filepath.Dir(filepath.Dir(d)), "alias")
			if err := os.Symlink(filepath.Dir(d), alias); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(alias, "plugins"), filepath.Join(alias, "plugins", "p")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, path := tc.setup(t)
			r := newRunner(t, dir, nil)
			_, err := r.Version(context.Background(), path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || codeOf(t, err) != plugins.CodeInvalidConfig || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want code 3 containing %q", err, tc.want)
			}
		})
	}
}

// VERSION's answer is kept while the plugin's file is unchanged: many
// calls start it once; a rewrite or a chmod makes the next call ask again;
// the file's ownership and mode are checked on every call all the same.
func TestVersionKeptWhileFileUnchanged(t *testing.T) {
	dir := t.TempDir()
	body := `
case "$SCOUR_COMMAND" in
VERSION) echo x >> "$(dirname "$0")/asked"; echo '{"supported_versions":["1.0"]}'; exit 0;;
esac
echo '{"status":"ok"}'
`
	p := writePlugin(t, dir, "counted", body)
	r := newRunner(t, dir, nil)
	ctx := context.Background()
	asked := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "asked"))
		return strings.Count(string(b), "x")
	}
	version := func(want int) {
		t.Helper()
		if v, err := r.Version(ctx, p); err != nil || v != "1.0" {
			t.Fatalf("Version = %q, %v", v, err)
		}
		if n := asked(); n != want {
			t.Fatalf("VERSION ran %d times, want %d", n, want)
		}
	}
	for i := 0; i < 3; i++ {
		version(1)
	}
	if _, err := r.Check(ctx, p, "1.0", testRequest()); err != nil {
		t.Fatal(err)
	}
	version(1)
	// File times tick with the kernel's clock (a jiffy, up to 10 ms): let
	// one pass so that each change shows.
	time.Sleep(20 * time.Millisecond)
	writePlugin(t, dir, "counted", body) // same bytes, written again
	version(2)
	version(2)
	time.Sleep(20 * time.Millisecond)
	if err := os.Chmod(p, 0o700); err != nil {
		t.Fatal(err)
	}
	version(3)
	if err := os.Chmod(p, 0o775); err != nil { // group-writable: refused
		t.Fatal(err)
	}
	if _, err := r.Version(ctx, p); codeOf(t, err) != plugins.CodeInvalidConfig {
		t.Fatalf("group-writable plugin: %v, want an invalid-config refusal though its version was known", err)
	}
	if n := asked(); n != 3 {
		t.Fatalf("VERSION ran %d times, want 3", n)
	}
}

// TestResultNamesTheFileThatStarted: the SHA-256 the runner reports (what
// the record names) is of the file it started, also when the plugin's
// file is replaced while it runs, for a result and for an error alike.
func TestResultNamesTheFileThatStarted(t *testing.T) {
	for name, final := range map[string]string{
		"ok":    `echo '{"status":"ok"}'`,
		"error": `echo '{"code":12,"msg":"broken"}'; exit 1`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			r := newRunner(t, dir, nil)
			// Replaced (renamed over, as a package upgrade does) mid-step.
			p := writePlugin(t, dir, "wipe", `printf '#!/bin/sh\necho new\n' > "$0.new" && mv "$0.new" "$0"
`+final+"\n")
			want := sha256File(t, p)
			res, err := r.Clean(context.Background(), p, "1.0", testRequest(), nil)
			got := ""
			var pe *plugins.Error
			switch {
			case res != nil:
				got = res.SHA256
			case errors.As(err, &pe):
				got = pe.SHA256
			default:
				t.Fatalf("Clean = %v, %v", res, err)
			}
			if now := sha256File(t, p); now == want {
				t.Fatalf("the plugin did not replace its file")
			}
			if got != want {
				t.Errorf("SHA-256 reported %q, want the started file's %q", got, want)
			}
		})
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
