package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/placement"
)

type fakeRuns struct {
	runs  []claims.Run
	steps map[string][]claims.Step
}

func (f fakeRuns) ListRuns(_ context.Context, flt claims.RunFilter) ([]claims.Run, error) {
	var out []claims.Run
	for _, r := range f.runs {
		if r.DeviceRP == flt.Device && r.Host == flt.Host {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f fakeRuns) ActiveQuarantine(_ context.Context, host, rp string) (claims.Quarantine, bool, error) {
	if rp == "rp-2" {
		return claims.Quarantine{Reason: "retired by alice: RMA 42"}, true, nil
	}
	return claims.Quarantine{}, false, nil
}

func (f fakeRuns) Steps(_ context.Context, runID string) ([]claims.Step, error) {
	return f.steps[runID], nil
}

func (f fakeRuns) UnfinishedRuns(_ context.Context, host string) ([]claims.Run, error) {
	var out []claims.Run
	for _, r := range f.runs {
		if r.Host == host && r.EndedAt == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f fakeRuns) OpenQuarantines(_ context.Context, host string) ([]claims.Quarantine, error) {
	return []claims.Quarantine{{Host: host, DeviceRP: "rp-2", Address: "0000:82:00.0", Reason: "retired by alice: RMA 42"}}, nil
}

// Without Placement the store's open runs and quarantines are listed,
// their Placement state marked unknown; a device with neither is not.
func TestStoreStatusListsOpenRunsAndQuarantines(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ended := now.Add(-time.Hour)
	runs := fakeRuns{runs: []claims.Run{
		{ID: "run-3", RunStart: claims.RunStart{Host: "cmp1", DeviceRP: "rp-3", Address: "0000:83:00.0"}, State: claims.RunRunning, StartedAt: now.Add(-10 * time.Minute)},
		{ID: "run-1", RunStart: claims.RunStart{Host: "cmp1", DeviceRP: "rp-1", Address: "0000:81:00.0"}, State: claims.RunReturned, StartedAt: now.Add(-2 * time.Hour), EndedAt: &ended},
		{ID: "run-9", RunStart: claims.RunStart{Host: "cmp9", DeviceRP: "rp-9", Address: "0000:89:00.0"}, State: claims.RunRunning, StartedAt: now},
	}, steps: map[string][]claims.Step{"run-3": {{Name: "sanitize", StartedAt: now.Add(-10 * time.Minute), Progress: 50}}}}
	st, err := StoreStatus(context.Background(), runs, "cmp1", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 {
		t.Fatalf("StoreStatus listed %d devices, want rp-2 (quarantined) and rp-3 (open run): %+v", len(st), st)
	}
	q, open := st[0], st[1]
	if q.RP != "rp-2" || q.Address != "0000:82:00.0" || q.Held != "retired by alice: RMA 42" || q.OpenRun != "" {
		t.Errorf("quarantined device: %+v", q)
	}
	if open.RP != "rp-3" || open.OpenRun != "run-3" || open.Step != "sanitize" || open.Percent == nil || *open.Percent != 50 {
		t.Errorf("device with an open run: %+v", open)
	}
	for _, d := range st {
		if !d.PlacementUnknown || d.State != StatePlacementUnknown {
			t.Errorf("%s: state %q, placement_unknown %v; want Placement's view marked missing", d.RP, d.State, d.PlacementUnknown)
		}
	}
}

// The open run's current step, its percent and the ETA at its pace so
// far; the last finished run's verdict.
func TestStatusStepPercentETA(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ended := now.Add(-time.Hour)
	runs := fakeRuns{
		runs: []claims.Run{
			{ID: "run-2", RunStart: claims.RunStart{Host: "cmp1", DeviceRP: "rp-1"}, State: claims.RunRunning, StartedAt: now.Add(-20 * time.Minute)},
			{ID: "run-1", RunStart: claims.RunStart{Host: "cmp1", DeviceRP: "rp-1"}, State: claims.RunReturned, StartedAt: now.Add(-2 * time.Hour), EndedAt: &ended},
			{ID: "run-3", RunStart: claims.RunStart{Host: "cmp1", DeviceRP: "rp-2"}, State: claims.RunRunning, StartedAt: now.Add(-time.Minute)},
		},
		steps: map[string][]claims.Step{
			"run-2": {
				{Name: "wear", StartedAt: now.Add(-20 * time.Minute), EndedAt: &ended, Progress: 100},
				{Name: "sanitize", StartedAt: now.Add(-10 * time.Minute), Progress: 25},
			},
			"run-3": {{Name: "sanitize", StartedAt: now.Add(-time.Minute)}},
		},
	}
	devs := []placement.Device{
		{Ref: placement.Ref{UUID: "rp-1", Name: "cmp1_0000:81:00.0", Address: "0000:81:00.0"}, State: placement.StateDirty},
		{Ref: placement.Ref{UUID: "rp-2", Name: "cmp1_0000:82:00.0", Address: "0000:82:00.0"}, State: placement.StateDirty},
	}
	devs[0].Inventory.Reserved, devs[0].Inventory.Total = 1, 1
	st, err := Status(context.Background(), devs, runs, "cmp1", now)
	if err != nil {
		t.Fatal(err)
	}
	d := st[0]
	if d.OpenRun != "run-2" || d.LastRun != "run-1" || d.Verdict != "returned" || d.Step != "sanitize" || d.Percent == nil || *d.Percent != 25 ||
		d.Reserved != 1 || d.Total != 1 {
		t.Fatalf("status %+v", d)
	}
	// 25% in 10 minutes: 30 more minutes.
	if d.ETA == nil || !d.ETA.Equal(now.Add(30*time.Minute)) {
		t.Errorf("ETA %v, want %v", d.ETA, now.Add(30*time.Minute))
	}
	if d.Held != "" || st[1].Held != "retired by alice: RMA 42" {
		t.Errorf("held: %q, %q", d.Held, st[1].Held)
	}
	if st[1].Step != "sanitize" || *st[1].Percent != 0 || st[1].ETA != nil {
		t.Errorf("a step without progress yet: %+v (no ETA expected)", st[1])
	}
}

type fakeBackend struct {
	mu      sync.Mutex
	rescans []string
	// placementErr: Placement did not answer (multi-line, as wrapped
	// errors can be).
	placementErr string
}

func (b *fakeBackend) Status(context.Context) (Report, error) {
	p := 40
	b.mu.Lock()
	defer b.mu.Unlock()
	return Report{Devices: []DeviceStatus{{Address: "0000:81:00.0", Step: "sanitize", Percent: &p}}, PlacementError: b.placementErr}, nil
}

func (b *fakeBackend) Clean(_ context.Context, device, by string) (string, error) {
	if device == "busy" {
		return "", &OperatorError{"device busy is allocated to vm-1"}
	}
	return "cleaning " + device + " for " + by, nil
}

func (b *fakeBackend) Retire(_ context.Context, device, by, reason string, noWipe bool) (string, error) {
	msg := "retired " + device + " by " + by + ": " + reason
	if noWipe {
		msg += " (no wipe)"
	}
	return msg, nil
}

func (b *fakeBackend) Rescan(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rescans = append(b.rescans, reason)
}

// The socket is root's and the group's only (0660), answers status and
// rescan, and is gone after Shutdown.
func TestSocketPermissionsAndCalls(t *testing.T) {
	t.Parallel()
	g, err := user.LookupGroup("daemon")
	if err != nil {
		t.Fatalf("this test gives the socket to group daemon, which Debian always has: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "run", "scourd.sock")
	b := &fakeBackend{}
	srv, err := Listen(Config{Socket: sock, Group: "daemon"}, b, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	if fi.Mode().Perm() != 0o660 || fi.Sys().(*syscall.Stat_t).Gid != uint32(gid) {
		t.Errorf("socket mode %v gid %d; want 0660 and daemon's gid %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, gid)
	}
	c := NewClient(sock)
	st, err := c.Status(context.Background())
	if err != nil || len(st.Devices) != 1 || *st.Devices[0].Percent != 40 || st.PlacementError != "" {
		t.Fatalf("Status: %+v, %v", st, err)
	}
	// Placement down: the devices still come, with why Placement's view
	// is missing.
	b.mu.Lock()
	b.placementErr = "scanning this host in Placement:\nconnection refused"
	b.mu.Unlock()
	st, err = c.Status(context.Background())
	if err != nil || len(st.Devices) != 1 || st.PlacementError != "scanning this host in Placement: connection refused" {
		t.Fatalf("Status with Placement down: %+v, %v", st, err)
	}
	if err := c.Rescan(context.Background(), "unquarantine of rp-1"); err != nil {
		t.Fatal(err)
	}
	if msg, err := c.Clean(context.Background(), "0000:81:00.0", "alice"); err != nil || msg != "cleaning 0000:81:00.0 for alice" {
		t.Errorf("Clean: %q, %v", msg, err)
	}
	if _, err := c.Clean(context.Background(), "busy", "alice"); err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "allocated to vm-1") {
		t.Errorf("Clean of a busy device: %v; want the backend's refusal with 409", err)
	}
	if msg, err := c.Retire(context.Background(), "0000:81:00.0", "alice", "RMA & co", false); err != nil || msg != "retired 0000:81:00.0 by alice: RMA & co" {
		t.Errorf("Retire: %q, %v", msg, err)
	}
	if msg, err := c.Retire(context.Background(), "0000:81:00.0", "alice", "shredded", true); err != nil || msg != "retired 0000:81:00.0 by alice: shredded (no wipe)" {
		t.Errorf("Retire --no-wipe: %q, %v; want the backend told not to wipe", msg, err)
	}
	if _, err := c.Retire(context.Background(), "0000:81:00.0", "alice", " ", false); err == nil || !strings.Contains(err.Error(), "needs a reason") {
		t.Errorf("Retire without a reason: %v", err)
	}
	b.mu.Lock()
	if len(b.rescans) != 1 || b.rescans[0] != "operator: unquarantine of rp-1" {
		t.Errorf("rescans %v", b.rescans)
	}
	b.mu.Unlock()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("after Shutdown: %v; want ErrNotRunning", err)
	}
	// A stale socket file from a crashed scourd is replaced.
	srv2, err := Listen(Config{Socket: sock}, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv2.ln.Close()
	srv3, err := Listen(Config{Socket: sock}, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	_ = srv3.Shutdown(context.Background())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Socket: "run/scourd.sock"}, "not an absolute path"},
		{Config{Socket: "/run/scour/scourd.sock", Group: "no-such-group-scour"}, "admin.group"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.c, err, tc.want)
		}
	}
}
