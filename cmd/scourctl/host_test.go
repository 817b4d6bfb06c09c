package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scour-project/scour/claims"
)

// scourctl host adopt OLD moves OLD's open retirement to the configured
// host, and only with scourd stopped (this host's lock free), only a name
// that holds open records of this machine, never the host's own name.
func TestHostAdopt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ccfg := claims.Config{StatePath: dir}
	s, err := claims.Open(ctx, ccfg, claims.WithLogger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Retire(ctx, "cmp-a", "rp-1", "0000:81:00.0", "alice", "RMA", "", ""); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cfg := writeScourYAML(t, "cmp-b", dir)
	adopt := func(old string) (int, string) {
		var out, errb bytes.Buffer
		code := run(ctx, []string{"host", "adopt", old, "--config", cfg}, &out, &errb)
		return code, out.String() + errb.String()
	}

	running, err := claims.Open(ctx, ccfg, claims.WithLogger(quietLog()), claims.WithHostLock("cmp-b"))
	if err != nil {
		t.Fatal(err)
	}
	if code, out := adopt("cmp-a"); code == 0 || !strings.Contains(out, "stop scourd first") {
		t.Errorf("adopt while scourd holds the lock: exit %d\n%s", code, out)
	}
	running.Close()
	if code, out := adopt("cmp-b"); code != 2 {
		t.Errorf("adopt of the host's own name: exit %d, want 2\n%s", code, out)
	}
	if code, out := adopt("cmp-x"); code == 0 || !strings.Contains(out, "nothing to adopt") {
		t.Errorf("adopt of a name with nothing open: exit %d\n%s", code, out)
	}
	code, out := adopt("cmp-a")
	if code != 0 || !strings.Contains(out, "moved from host cmp-a to host cmp-b: 1 open quarantines or retirements") {
		t.Fatalf("adopt cmp-a: exit %d\n%s", code, out)
	}
	s, err = claims.Open(ctx, ccfg, claims.WithLogger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.ActiveQuarantine(ctx, "cmp-b", "rp-1"); err != nil || !ok {
		t.Errorf("cmp-b's retirement of rp-1 after the adopt: %v, %v", ok, err)
	}
}

// Where scourd already ran under the new name, host adopt closes the old
// name's run of a device the new name cleans too: sealed into the old
// name's chain and signed with the host's record key, as scourd would,
// so records verify of the old name still passes; the operator sees the
// run superseded and the chain head it advanced to.
func TestHostAdoptSignsTheRunsItCloses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ccfg := claims.Config{StatePath: dir, SigningKey: claims.DefaultSigningKey}
	signer, _, err := claims.LoadOrCreateKey(ccfg.SigningKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	s, err := claims.Open(ctx, ccfg, claims.WithLogger(quietLog()), claims.WithSigner(signer))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterKey(ctx, "cmp-a"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"cmp-a", "cmp-b"} {
		if _, _, err := s.OpenRun(ctx, claims.RunStart{Host: h, DeviceRP: "rp-1", Address: "0000:81:00.0"}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	cfg := writeScourYAML(t, "cmp-b", dir)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"host", "adopt", "cmp-a", "--config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("adopt cmp-a: exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"1 open runs of devices cmp-b cleans too closed under cmp-a as superseded", "record chain of host cmp-a advanced"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not say %q:\n%s", want, out.String())
		}
	}
	s, err = claims.Open(ctx, ccfg, claims.WithLogger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rep, err := s.VerifyHost(ctx, "cmp-a", nil); err != nil || rep.Records != 1 {
		t.Errorf("records verify --host cmp-a after the adopt: %+v, %v; want its closed run signed", rep, err)
	}
	if runs, err := s.UnfinishedRuns(ctx, "cmp-b"); err != nil || len(runs) != 1 {
		t.Errorf("cmp-b's open runs: %+v, %v; want its own", runs, err)
	}
}

// writeScourYAML writes a scour.yaml of host over the sqlite store in
// stateDir, one NVMe profile, and clears configEnv: --config names it.
func writeScourYAML(t *testing.T, host, stateDir string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "scour.yaml")
	if err := os.WriteFile(cfg, []byte(`host: `+host+`
claims:
  state_path: `+stateDir+`
pipelines:
  profiles:
    - name: nvme
      match: {kinds: [nvme]}
      pipeline: {name: nvme, steps: [{name: sanitize, type: nvme-sanitize}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(configEnv, "")
	return cfg
}
