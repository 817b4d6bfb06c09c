package hardware

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// heldList is a host whose `nvme list` runs are numbered from 1: run 1
// is held until release is closed, and round(n) answers run n. Every
// other tool answers from the fixtures.
type heldList struct {
	*FakeRunner
	started, release chan struct{}
	mu               sync.Mutex
	runs             int
	cancelled1       bool // run 1's ctx ended while it was held
}

func newHeldList(t *testing.T, round func(n int) ([]byte, error)) *heldList {
	h := &heldList{started: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	h.FakeRunner = fixtureRunner(t, func(cmd string) ([]byte, error, bool) { return nil, nil, false })
	inner := h.RunF
	h.RunF = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if strings.Join(args, " ") != "list -v -o json" {
			return inner(ctx, name, args...)
		}
		h.mu.Lock()
		h.runs++
		n := h.runs
		h.mu.Unlock()
		if n == 1 {
			close(h.started)
			select {
			case <-h.release:
			case <-ctx.Done():
				h.mu.Lock()
				h.cancelled1 = true
				h.mu.Unlock()
				<-h.release
				return nil, ctx.Err()
			}
		}
		return round(n)
	}
	return h
}

func (h *heldList) listRuns() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs
}

// waitAsked waits until n callers asked b for an nvme list.
func waitAsked(t *testing.T, b *Real, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); runtime.Gosched() {
		b.nvmeList.mu.Lock()
		asked := b.nvmeList.asked
		b.nvmeList.mu.Unlock()
		if asked == n {
			return
		}
	}
	t.Fatalf("%d callers never asked for a shared nvme list", n)
}

// listWithNewNamespace is the fixture's nvme list after a namespace
// nvme1n3 was created and attached to nvme1 (0000:81:00.0).
func listWithNewNamespace(t *testing.T) []byte {
	out := strings.Replace(string(fixture(t, "nvme-list-v.json")), `"Path": "nvme1c1n2"`, `"Path": "nvme1c1n2"}, {"Path": "nvme1c1n3"`, 1)
	ctrls, err := ParseNVMeList([]byte(out))
	if err != nil || len(ctrls) < 2 || len(ctrls[1].Namespaces) != 3 {
		t.Fatalf("nvme list with nvme1n3: %v %v", ctrls, err)
	}
	return []byte(out)
}

type ctrlAnswer struct {
	addr       Address
	ctrl       string
	namespaces []string
	err        error
}

func askCtrl(ctx context.Context, b *Real, addr Address, got chan<- ctrlAnswer) {
	dev, ctrl, err := b.nvmeCtrl(ctx, addr)
	a := ctrlAnswer{addr: addr, ctrl: ctrl, err: err}
	if dev != nil {
		a.namespaces = dev.NVMe.Namespaces
	}
	got <- a
}

var (
	ctrlOf       = map[Address]string{"0000:01:00.0": "nvme0", "0000:81:00.0": "nvme1"}
	namespacesOf = map[Address][]string{"0000:01:00.0": {"/dev/nvme0n1"}, "0000:81:00.0": {"/dev/nvme1n1", "/dev/nvme1n2"}}
)

// Eight callers asking while a run is held share at most two runs (the
// held one, with those that asked before it began, and the next), and
// each device still gets its own controller and namespaces.
func TestNVMeListSharedByConcurrentCallers(t *testing.T) {
	t.Parallel()
	list := fixture(t, "nvme-list-v.json")
	h := newHeldList(t, func(int) ([]byte, error) { return list, nil })
	b := newTestReal(t, Config{}, h.FakeRunner)
	got := make(chan ctrlAnswer, 8)
	for i := range 8 {
		addr := Address("0000:01:00.0")
		if i%2 == 1 {
			addr = "0000:81:00.0"
		}
		go askCtrl(context.Background(), b, addr, got)
	}
	<-h.started
	waitAsked(t, b, 8)
	close(h.release)
	for range 8 {
		a := <-got
		if a.err != nil || a.ctrl != ctrlOf[a.addr] || !cmp.Equal(a.namespaces, namespacesOf[a.addr]) {
			t.Errorf("%s: controller %q namespaces %v err %v, want %s %v", a.addr, a.ctrl, a.namespaces, a.err, ctrlOf[a.addr], namespacesOf[a.addr])
		}
	}
	if n := h.listRuns(); n > 2 {
		t.Errorf("8 concurrent callers ran nvme list %d times, want at most 2", n)
	}
}

// A caller that asks while a run is under way gets the next run's
// output, never the one already running: here that one predates a
// namespace created meanwhile.
func TestNVMeListNeverOlderThanTheRequest(t *testing.T) {
	t.Parallel()
	before, after := fixture(t, "nvme-list-v.json"), listWithNewNamespace(t)
	h := newHeldList(t, func(n int) ([]byte, error) {
		if n == 1 {
			return before, nil
		}
		return after, nil
	})
	b := newTestReal(t, Config{}, h.FakeRunner)
	gotA, gotB := make(chan ctrlAnswer, 1), make(chan ctrlAnswer, 1)
	go askCtrl(context.Background(), b, "0000:81:00.0", gotA)
	<-h.started // run 1 lists nvme1 without nvme1n3
	go askCtrl(context.Background(), b, "0000:81:00.0", gotB)
	waitAsked(t, b, 2)
	close(h.release)
	if a := <-gotA; !cmp.Equal(a.namespaces, []string{"/dev/nvme1n1", "/dev/nvme1n2"}) {
		t.Errorf("caller A (run 1): namespaces %v err %v", a.namespaces, a.err)
	}
	if a := <-gotB; !cmp.Equal(a.namespaces, []string{"/dev/nvme1n1", "/dev/nvme1n2", "/dev/nvme1n3"}) {
		t.Errorf("caller B asked while run 1 ran: namespaces %v err %v, want run 2's, with nvme1n3", a.namespaces, a.err)
	}
	if n := h.listRuns(); n != 2 {
		t.Errorf("nvme list ran %d times, want 2", n)
	}
}

// A caller whose ctx ends stops waiting at once; the run it started goes
// on (under the tool timeout, not its ctx) and the others get theirs.
func TestNVMeListCallerCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	list := listWithNewNamespace(t)
	h := newHeldList(t, func(int) ([]byte, error) { return list, nil })
	b := newTestReal(t, Config{}, h.FakeRunner)
	starter, cancelStarter := context.WithCancel(context.Background())
	defer cancelStarter()
	starterErr := make(chan error, 1)
	go func() {
		_, err := b.Discover(starter, "0000:81:00.0")
		starterErr <- err
	}()
	<-h.started // run 1, started for the starter, is held
	waiter, cancelWaiter := context.WithCancel(context.Background())
	defer cancelWaiter()
	gotW, gotC := make(chan ctrlAnswer, 1), make(chan ctrlAnswer, 1)
	go askCtrl(waiter, b, "0000:01:00.0", gotW)
	go askCtrl(context.Background(), b, "0000:81:00.0", gotC)
	waitAsked(t, b, 3)
	cancelStarter()
	cancelWaiter()
	// Both return while run 1 is still held.
	for _, wait := range []func() error{
		func() error { return <-starterErr },
		func() error { <-gotW; return context.Canceled },
	} {
		done := make(chan error, 1)
		go func() { done <- wait() }()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled caller: err %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a cancelled caller still waits for the held nvme list")
		}
	}
	close(h.release)
	if a := <-gotC; a.err != nil || !cmp.Equal(a.namespaces, []string{"/dev/nvme1n1", "/dev/nvme1n2", "/dev/nvme1n3"}) {
		t.Errorf("the caller still waiting: namespaces %v err %v, want run 2's", a.namespaces, a.err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancelled1 {
		t.Error("run 1 was cancelled with the caller that started it")
	}
}

// A failed run's error reaches every caller of that run, which each fall
// back to sysfs; none runs nvme list again on its own.
func TestNVMeListErrorShared(t *testing.T) {
	t.Parallel()
	list := listWithNewNamespace(t)
	h := newHeldList(t, func(n int) ([]byte, error) {
		if n == 1 {
			return list, nil
		}
		return nil, &ToolError{Cmd: "nvme list -v -o json", ExitCode: 1, Stderr: "failed to open /dev/nvme3"}
	})
	b := newTestReal(t, Config{}, h.FakeRunner)
	gotA, got := make(chan ctrlAnswer, 1), make(chan ctrlAnswer, 4)
	go askCtrl(context.Background(), b, "0000:81:00.0", gotA)
	<-h.started
	for i := range 4 {
		addr := Address("0000:01:00.0")
		if i%2 == 1 {
			addr = "0000:81:00.0"
		}
		go askCtrl(context.Background(), b, addr, got)
	}
	waitAsked(t, b, 5)
	close(h.release)
	if a := <-gotA; len(a.namespaces) != 3 {
		t.Errorf("caller of run 1: namespaces %v err %v, want run 1's (nvme1n3)", a.namespaces, a.err)
	}
	for range 4 {
		// From sysfs: no nvme1n3, which only nvme list named.
		if a := <-got; a.err != nil || a.ctrl != ctrlOf[a.addr] || !cmp.Equal(a.namespaces, namespacesOf[a.addr]) {
			t.Errorf("%s after a failed nvme list: controller %q namespaces %v err %v, want sysfs's %s %v", a.addr, a.ctrl, a.namespaces, a.err, ctrlOf[a.addr], namespacesOf[a.addr])
		}
	}
	if n := h.listRuns(); n != 2 {
		t.Errorf("nvme list ran %d times, want 2 (its error shared by the 4 callers of run 2)", n)
	}
}
