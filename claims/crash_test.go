package claims

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// crashChildEnv makes the test binary act as the crash test's writer: it
// holds the store configuration as JSON.
const crashChildEnv = "SCOUR_CLAIMS_CRASH_CHILD"

const crashHost, crashInstance = "compute-1", "crash-inst"

// crashChild writes in a loop until killed. Each loop makes two
// transactions that each change two related rows (every other loop a
// third), and prints "tick N" only after all committed.
func crashChild() {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(crashChildEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "crash child: config:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	s, err := Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	runs, err := s.UnfinishedRuns(ctx, crashHost)
	if err != nil || len(runs) != 1 {
		fmt.Fprintln(os.Stderr, "crash child: runs:", runs, err)
		os.Exit(3)
	}
	for i := 0; ; i++ {
		// Both claims of the resizing instance get the volume in one UPDATE.
		err := s.UpdateVolumes(ctx, crashHost, crashInstance, func(v *Volumes) error {
			v.Attached = append(v.Attached, Volume{ID: "vol-" + strconv.Itoa(len(v.Attached))})
			return nil
		})
		if err == nil {
			// Closes the open attempt as interrupted and opens the next.
			_, err = s.StepStarted(ctx, StepStart{RunID: runs[0].ID, Name: "wipe"})
		}
		if err == nil && i%2 == 1 {
			// A step decided without being started: closes the open wipe
			// as interrupted and records a started-and-ended attempt, in
			// one transaction; the next tick opens a wipe again.
			err = s.FinishStep(ctx, StepStart{RunID: runs[0].ID, Name: "skip", Index: 1}, StepResult{Outcome: StepSkipped})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		fmt.Printf("tick %d\n", i)
	}
}

func TestCrashMidWriteLeavesOldOrNew(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		ctx := context.Background()
		s := mustOpen(t, cfg)
		src := gpuClaim(crashInstance, "rp-a")
		dst := gpuClaim(crashInstance, "rp-b")
		dst.ResizeTarget, dst.MessageID = true, "m-r"
		for _, c := range []Claim{src, dst} {
			if _, err := s.RecordClaim(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		run, _, err := s.OpenRun(ctx, RunStart{Host: crashHost, DeviceRP: "rp-z", Pipeline: "nvme"})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		child := cfg
		app := fmt.Sprintf("scour_crash_child_%d", pgSchema.Add(1))
		if cfg.Driver == DriverPostgres {
			// Named, so that the parent can wait for its server sessions.
			child.DSN += "&application_name=" + app
		}
		cfgJSON, _ := json.Marshal(child)

		committed := -1 // highest tick a child reported
		for round := 0; round < 4; round++ {
			ticks := crashOnce(t, string(cfgJSON), 5+rand.IntN(40))
			if cfg.Driver == DriverPostgres {
				waitSessionsGone(t, app)
			}
			committed += ticks
			s := mustOpen(t, cfg)
			vols := checkCrashInvariants(t, s, run.ID)
			// Every reported tick was committed before it was printed; the
			// write in flight at the kill may or may not be there.
			if vols < committed+1 || vols > committed+2 {
				t.Fatalf("round %d: %d volumes after %d reported ticks: a committed write was lost or a phantom appeared", round, vols, committed+1)
			}
			committed = vols - 1
			if cfg.Driver == DriverSQLite {
				var res string
				if err := s.r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res); err != nil || res != "ok" {
					t.Fatalf("round %d: integrity_check = %q, %v", round, res, err)
				}
			}
			s.Close()
		}
	})
}

// crashOnce starts a writer child, kills it with SIGKILL after it reported
// `after` ticks plus a random delay (so the kill lands mid-write), and
// returns how many ticks it reported.
// waitSessionsGone waits until PostgreSQL has no session of the killed
// child left. The server runs a statement it already received to its end
// even when the client is gone (a COMMIT sent just before the SIGKILL
// commits), and only then notices the closed socket: counting before that
// could miss a write that commits afterwards and count it in the next
// round as a phantom.
func waitSessionsGone(t *testing.T, app string) {
	t.Helper()
	admin := needPostgres(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d PostgreSQL session(s) of the killed child %s still open after 30 s", n, app)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func crashOnce(t *testing.T, cfgJSON string, after int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+cfgJSON)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	ticks := 0
	deadline := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for ticks < after && sc.Scan() {
		ticks++
	}
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	for sc.Scan() { // ticks printed before the kill still count
		ticks++
	}
	_ = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("writer child was not killed by the signal (exit %v); stderr: %s", cmd.ProcessState, stderr.String())
	}
	if ticks < after {
		t.Fatalf("writer child reported %d ticks, want %d; stderr: %s", ticks, after, stderr.String())
	}
	return ticks
}

// checkCrashInvariants proves each two-row write is all or nothing and
// returns the number of volumes.
func checkCrashInvariants(t *testing.T, s *Store, runID string) int {
	t.Helper()
	ctx := context.Background()
	cs, err := s.ClaimsForInstance(ctx, crashHost, crashInstance)
	if err != nil || len(cs) != 2 {
		t.Fatalf("claims after crash: %d, %v", len(cs), err)
	}
	a, b := cs[0].Volumes.Attached, cs[1].Volumes.Attached
	if !slices.Equal(a, b) {
		t.Fatalf("the two claims' volumes differ after a crash (a mix of old and new): %d vs %d", len(a), len(b))
	}
	for i, v := range a {
		if v.ID != "vol-"+strconv.Itoa(i) {
			t.Fatalf("volume %d is %q: a write was torn", i, v.ID)
		}
	}
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	open, attempts := 0, map[string]int{}
	for i, st := range steps {
		attempts[st.Name]++
		if st.Seq != i+1 || st.Attempt != attempts[st.Name] {
			t.Fatalf("step %d (%s) has seq %d attempt %d: attempts not contiguous", i, st.Name, st.Seq, st.Attempt)
		}
		switch {
		case st.Name == "skip" && (st.EndedAt == nil || st.Outcome != StepSkipped):
			t.Fatalf("skip attempt %d is %q, ended %v: recording a step decided without starting it was not atomic", st.Attempt, st.Outcome, st.EndedAt)
		case st.Name == "skip":
		case st.EndedAt == nil:
			open++
		case st.Outcome != StepInterrupted:
			t.Fatalf("closed attempt %d has outcome %q", st.Attempt, st.Outcome)
		}
	}
	if open > 1 || (open == 1 && steps[len(steps)-1].EndedAt != nil) {
		t.Fatalf("%d open attempts (want at most the last one): closing the old and opening the new attempt was not atomic", open)
	}
	return len(a)
}
