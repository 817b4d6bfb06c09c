//go:build kernelguest

package guest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/claims/pipelinestore"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/kernellane"
	"github.com/scour-project/scour/pipeline"
)

var ctx = context.Background()

func logger() *slog.Logger { return slog.New(slog.NewTextHandler(os.Stderr, nil)) }

// real is hardware.Real on the guest's own /sys and nvme-cli.
func real(t *testing.T) *hardware.Real {
	t.Helper()
	r, err := hardware.NewReal(hardware.Config{Backend: hardware.BackendReal}, hardware.WithLogger(logger()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func driver(addr string) string {
	l, _ := os.Readlink(filepath.Join("/sys/bus/pci/devices", addr, "driver"))
	return filepath.Base(l)
}

// namespaces lists addr's namespace block devices as sysfs shows them.
func namespaces(addr string) []string {
	m, _ := filepath.Glob(filepath.Join("/sys/bus/pci/devices", addr, "nvme", "nvme*", "nvme*n*"))
	var out []string
	for _, p := range m {
		if b := filepath.Base(p); !strings.Contains(b, "c") { // nvme0c0n1 are multipath paths
			out = append(out, "/dev/"+b)
		}
	}
	return out
}

// bind binds d to drv and, for nvme, waits until its namespaces have block
// devices (the kernel scans them after the probe returns).
func bind(t *testing.T, d kernellane.Disk, drv string) {
	t.Helper()
	if _, err := real(t).BindDriver(ctx, hardware.Address(d.Addr), drv); err != nil {
		t.Fatalf("bind %s (%s) to %s: %v", d.Addr, d.Serial, drv, err)
	}
	if drv == "nvme" {
		waitNamespaces(t, d)
	}
}

func waitNamespaces(t *testing.T, d kernellane.Disk) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ns := namespaces(d.Addr)
		ok := len(ns) == len(d.SizesMiB)
		for _, n := range ns {
			if _, err := os.Stat(n); err != nil {
				ok = false
			}
		}
		if ok {
			return ns
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (%s): namespaces %v after 20s, want %d", d.Addr, d.Serial, ns, len(d.SizesMiB))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func disk(t *testing.T, serial string) kernellane.Disk {
	for _, d := range kernellane.Machine() {
		if d.Serial == serial {
			return d
		}
	}
	t.Fatalf("no disk %s", serial)
	return kernellane.Disk{}
}

// tenant is what the previous tenant left at the start, middle and end of
// every namespace.
func tenant(serial string) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("TENANT-DATA-OF-%s;", serial)), 4096/len("TENANT-DATA-OF-;")+1)[:4096]
}

// aligned returns an n-byte buffer aligned for O_DIRECT.
func aligned(t *testing.T, n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

func offsets(t *testing.T, dev string) []int64 {
	size, err := blockSize(dev)
	if err != nil {
		t.Fatal(err)
	}
	return []int64{0, (size / 2) &^ 4095, size - 4096}
}

func blockSize(dev string) (int64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, 2)
}

// writeTenant binds d to nvme, writes the tenant's data with O_DIRECT to
// every namespace, checks it is there, and binds d back to vfio-pci.
func writeTenant(t *testing.T, d kernellane.Disk) {
	t.Helper()
	bind(t, d, "nvme")
	buf := aligned(t, 4096)
	copy(buf, tenant(d.Serial))
	for _, ns := range namespaces(d.Addr) {
		f, err := os.OpenFile(ns, os.O_WRONLY|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, off := range offsets(t, ns) {
			if _, err := f.WriteAt(buf, off); err != nil {
				t.Fatalf("write tenant data to %s at %d: %v", ns, off, err)
			}
		}
		f.Close()
	}
	if !hasTenant(t, d) {
		t.Fatalf("%s: tenant data not readable right after writing it", d.Serial)
	}
	bind(t, d, "vfio-pci")
}

// hasTenant reports whether any namespace of d (bound to nvme for the
// look, then back to its driver) still holds tenant data; it also fails
// the test on a namespace that is neither the tenant's data nor zeros.
func hasTenant(t *testing.T, d kernellane.Disk) bool {
	t.Helper()
	if prev := driver(d.Addr); prev != "nvme" {
		bind(t, d, "nvme")
		defer bind(t, d, prev)
	}
	buf := aligned(t, 4096)
	found := false
	for _, ns := range namespaces(d.Addr) {
		f, err := os.OpenFile(ns, os.O_RDONLY|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, off := range offsets(t, ns) {
			if _, err := f.ReadAt(buf, off); err != nil {
				t.Fatalf("read %s at %d: %v", ns, off, err)
			}
			switch {
			case bytes.Equal(buf, tenant(d.Serial)):
				found = true
			case len(bytes.Trim(buf, "\x00")) != 0:
				t.Errorf("%s at %d: neither tenant data nor zeros: %q", ns, off, buf[:64])
			}
		}
		f.Close()
	}
	return found
}

// engine is the pipeline engine on the real backend with a real claims
// store (sqlite in a temporary folder), as scourd wires it.
func engine(t *testing.T, cfg pipeline.Config) (*pipeline.Engine, *claims.Store) {
	t.Helper()
	return engineOn(t, cfg, real(t))
}

// engineOn is engine on backend be.
func engineOn(t *testing.T, cfg pipeline.Config, be hardware.Backend) (*pipeline.Engine, *claims.Store) {
	t.Helper()
	store, err := claims.Open(ctx, claims.Config{StatePath: t.TempDir()}, claims.WithLogger(logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg.SetDefaults()
	e, err := pipeline.New(cfg, pipeline.Options{Backend: be, Logger: logger(),
		Checkpoints: &pipelinestore.Checkpoints{Store: store, Host: "kernellane", Trigger: "kernellane", Optional: cfg.StepOptional},
		Allocations: pipeline.AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	return e, store
}

func target(d kernellane.Disk) pipeline.Target {
	return pipeline.Target{Address: hardware.Address(d.Addr), RPUUID: "rp-" + d.Serial, RPName: "kernellane_" + d.Addr, ResourceClass: "CUSTOM_NVME"}
}

func steps(res *pipeline.Result) string {
	var s []string
	for _, st := range res.Steps {
		s = append(s, st.Name+"="+string(st.State))
	}
	return strings.Join(s, " ")
}
