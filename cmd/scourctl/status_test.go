package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/scour-project/scour/admin"
	"github.com/scour-project/scour/claims"
)

// While Placement is down (nothing listens at its endpoint) and scourd
// does not run, scourctl status lists what the local store knows, this
// host's open run and retirement, marks Placement's view missing, warns
// on stderr and exits 0. A store that cannot be read still fails.
func TestStatusWithPlacementDownShowsTheStore(t *testing.T) {
	dir, _ := seedRecordsStore(t) // compute-1: rp-nvme-0 returned, rp-nvme-1 (0000:82:00.0) open run
	s, err := claims.Open(context.Background(), claims.Config{StatePath: dir}, claims.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Retire(context.Background(), "compute-1", "rp-nvme-2", "0000:83:00.0", "alice", "RMA 42", "", ""); err != nil {
		t.Fatal(err)
	}
	s.Close()
	config := func(statePath string) string {
		p := filepath.Join(t.TempDir(), "scour.yaml")
		body := "host: compute-1\nclaims: {state_path: " + statePath + "}\nadmin: {socket: " + filepath.Join(t.TempDir(), "scourd.sock") + "}\n" +
			"placement: {endpoint: \"http://127.0.0.1:1\", token: t, retry: {attempts: 1}}\n" +
			"pipelines:\n  profiles:\n    - name: nvme\n      match: {kinds: [nvme]}\n      pipeline: {name: nvme, steps: [{name: sanitize, type: nvme-sanitize}]}\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv(configEnv, "")

	code, out, errs := recordsCLI("status", "--config", config(dir))
	if code != 0 {
		t.Fatalf("status with Placement down: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	unknown := regexp.QuoteMeta(admin.StatePlacementUnknown)
	for _, row := range []string{
		`0000:82:00.0\s+` + unknown + `\s+\?\s+.*\(since `, // the open run
		`0000:83:00.0\s+` + unknown + `\s+\?\s+.*RMA 42`,   // the retirement
	} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("stdout lacks a row matching %s:\n%s", row, out)
		}
	}
	if strings.Contains(out, "0000:81:00.0") {
		t.Errorf("a device with neither an open run nor a quarantine is listed:\n%s", out)
	}
	if !strings.Contains(errs, "warning: Placement's view is missing") || !strings.Contains(errs, "127.0.0.1:1") {
		t.Errorf("stderr does not warn that Placement's view is missing, and why:\n%s", errs)
	}

	// The store itself unreadable: an error, not an empty listing.
	notAStore := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notAStore, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := recordsCLI("status", "--config", config(notAStore)); code == 0 || !strings.Contains(errs, "claims store") {
		t.Errorf("status with an unreadable store: exit %d, want non-zero naming the claims store\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}
