// Package kernellane boots Debian's kernel in QEMU with emulated NVMe
// controllers, bound to vfio-pci as on a passthrough host, and runs scour's
// real hardware backend inside it (the "real kernel" lane, docs/e2e.md).
//
// scripts/kernel-lane.sh builds the kernel and initramfs (`make
// test-kernel`); the host tests here find them through SCOUR_KERNEL_LANE,
// boot guests, read the guest's report from its second serial port and fail
// on anything but a clean PASS. The tests that run inside the guest are in
// kernellane/guest (build tag kernelguest).
package kernellane

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EnvAssets names the folder holding vmlinuz and initramfs.cpio.
const EnvAssets = "SCOUR_KERNEL_LANE"

// Report lines /init writes to the guest's ttyS1.
const (
	markBooted = "SCOUR-GUEST-BOOTED "
	markExit   = "SCOUR-GUEST-EXIT "
	markFail   = "SCOUR-GUEST-FAIL "
	markProbe  = "SCOUR-GUEST-PROBE ok"
)

// Disk is one emulated NVMe controller of the guest.
type Disk struct {
	Addr      string // guest PCI address, 0000:00:XX.0
	Serial    string
	BlockSize int   // logical block size: 512 or 4096
	SizesMiB  []int // one per namespace
	Warning   int   // smart_critical_warning, 0 for a healthy drive
	// Subsys, when set, is the NQN of an nvme-subsys the controller
	// joins: QEMU then sets CMIC's multiple-controllers bit, and the
	// guest kernel's native multipath shows the namespaces as hidden
	// path nodes nvme<S>c<C>nN with block devices nvme<S>nN. Disks with
	// the same Subsys are controllers of one subsystem (QEMU wants them
	// to share Serial); its namespaces are shared, attached to every
	// controller of it but the Detached ones.
	Subsys string
	// Detached lists NSIDs (from 1) of this disk's namespaces that QEMU
	// allocates in Subsys but attaches to no controller at boot
	// (nvme-ns detached=true), as a tenant's created-then-detached
	// namespace is: the guest sees them only in `nvme list-ns --all`.
	Detached []int
	images   []string
}

// Machine is the guest hardware every lane test boots: four controllers
// with different serials, 512 B and 4 KiB logical blocks, one with two
// namespaces, one with a critical warning set.
func Machine() []Disk {
	return []Disk{
		{Addr: "0000:00:10.0", Serial: "SCOUR512", BlockSize: 512, SizesMiB: []int{64}},
		{Addr: "0000:00:11.0", Serial: "SCOUR4K", BlockSize: 4096, SizesMiB: []int{64}},
		{Addr: "0000:00:12.0", Serial: "SCOURTWONS", BlockSize: 512, SizesMiB: []int{32, 32}},
		{Addr: "0000:00:13.0", Serial: "SCOURWORN", BlockSize: 512, SizesMiB: []int{32}, Warning: 0x04},
	}
}

// MultipathMachine is the guest hardware of TestGuestMultipath: one
// controller with two namespaces in an NVM subsystem, as dual-port and
// many SR-IOV drives are, so the kernel uses native multipath for it.
func MultipathMachine() []Disk {
	return []Disk{{Addr: "0000:00:14.0", Serial: "SCOURMPATH", BlockSize: 512, SizesMiB: []int{32, 32}, Subsys: "nqn.2026-11.org.scour:mpath"}}
}

// HiddenNamespaceMachine is the guest hardware of TestGuestHiddenNamespace:
// two controllers of one NVM subsystem, as a dual-port drive has, with
// namespace management. NSID 1 is shared and attached to both; NSID 2 is
// allocated in the subsystem but attached to no controller, so a format
// through the first controller cannot reach it.
func HiddenNamespaceMachine() []Disk {
	const nqn = "nqn.2026-11.org.scour:hidden"
	return []Disk{
		{Addr: "0000:00:15.0", Serial: "SCOURHIDDEN", BlockSize: 512, SizesMiB: []int{32, 32}, Subsys: nqn, Detached: []int{2}},
		{Addr: "0000:00:16.0", Serial: "SCOURHIDDEN", BlockSize: 512, Subsys: nqn},
	}
}

// Boot describes one guest run.
type Boot struct {
	Assets  string // folder with vmlinuz and initramfs.cpio
	Dir     string // scratch folder: disk images, logs
	Disks   []Disk
	Cmdline []string // appended to the kernel command line (scour.run=...)
	Extra   string   // optional extra cpio archive appended to the initramfs
	QEMU    []string // extra QEMU arguments (networking)
	Timeout time.Duration
}

// Result is what came back from a guest.
type Result struct {
	Accel    string
	Booted   time.Duration // guest uptime when /init had bound the devices
	Wall     time.Duration // QEMU start to exit
	Report   string        // everything the guest wrote to ttyS1
	Console  string        // the kernel console (ttyS0)
	Record   string        // what the guest wrote to ttyS2 (scourd's record)
	ExitCode int           // of the guest's workload; -1 when it never reported
}

var (
	accelOnce sync.Once
	accel     string
)

// Accel returns "kvm" when a KVM guest boots and powers off here within
// 20 seconds, else "tcg". Nested KVM may hang at start on these machines
// rather than fail; a working KVM boots the probe in a few seconds (TCG
// in about ten), so a longer wait only delays every lane run.
func Accel(assets, dir string) string {
	accelOnce.Do(func() {
		accel = "tcg"
		if os.Getenv("SCOUR_KERNEL_ACCEL") == "tcg" {
			return
		}
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err != nil {
			return
		}
		f.Close()
		r, err := run(context.Background(), Boot{Assets: assets, Dir: filepath.Join(dir, "probe"), Cmdline: []string{"scour.run=probe"}, Timeout: 20 * time.Second}, "kvm")
		if err == nil && strings.Contains(r.Report, markProbe) {
			accel = "kvm"
		}
	})
	return accel
}

// Run boots b and waits for the guest to power off (or b.Timeout).
func Run(ctx context.Context, b Boot) (*Result, error) {
	g, err := Start(ctx, b, Accel(b.Assets, b.Dir))
	if err != nil {
		return nil, err
	}
	return g.Wait()
}

func run(ctx context.Context, b Boot, accel string) (*Result, error) {
	g, err := Start(ctx, b, accel)
	if err != nil {
		return nil, err
	}
	return g.Wait()
}

// Guest is a running QEMU.
type Guest struct {
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	ctx     context.Context
	stderr  bytes.Buffer
	args    []string
	accel   string
	start   time.Time
	timeout time.Duration
	done    chan struct{} // closed when QEMU exited; then waitErr is set
	waitErr error
	// Console, Report and Record are the host files behind ttyS0..ttyS2.
	Console, Report, Record string
}

// ImagePath is the host file behind namespace ns (from 1) of d.
func ImagePath(dir string, d Disk, ns int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-n%d.img", d.Serial, ns))
}

// Start boots b with accel ("kvm" or "tcg"; Accel picks). Namespace
// images that exist in b.Dir are kept (a test may put tenant data there
// first); missing ones are created sparse.
func Start(ctx context.Context, b Boot, accel string) (*Guest, error) {
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return nil, err
	}
	initrd := filepath.Join(b.Assets, "initramfs.cpio")
	if b.Extra != "" {
		initrd = filepath.Join(b.Dir, "initramfs.cpio")
		if err := concat(initrd, filepath.Join(b.Assets, "initramfs.cpio"), b.Extra); err != nil {
			return nil, err
		}
	}
	g := &Guest{accel: accel, Console: filepath.Join(b.Dir, "console.log"), Report: filepath.Join(b.Dir, "report.log"), Record: filepath.Join(b.Dir, "record.log")}
	args := []string{
		"-M", "q35", "-accel", accel, "-m", "1024", "-smp", "1",
		"-nodefaults", "-display", "none", "-no-reboot",
		"-serial", "file:" + g.Console, "-serial", "file:" + g.Report, "-serial", "file:" + g.Record,
		"-kernel", filepath.Join(b.Assets, "vmlinuz"), "-initrd", initrd,
		// loglevel=5: the console (shown when a guest test fails) gets the
		// kernel's warnings too, such as NVMe I/O timeouts and controller
		// resets, which "quiet" hides; a hung guest then says why.
		"-append", strings.Join(append([]string{"console=ttyS0", "intel_iommu=on", "iommu=pt", "panic=-1", "loglevel=5"}, b.Cmdline...), " "),
		// An IOMMU, so that vfio-pci can take the controllers as on a
		// passthrough host (Debian's kernel has no vfio no-IOMMU mode).
		"-device", "intel-iommu,intremap=off",
	}
	if accel == "kvm" {
		args = append(args, "-cpu", "host")
	} else {
		args = append(args, "-cpu", "max")
	}
	subsys := map[string]string{} // NQN -> nvme-subsys id
	for i, d := range b.Disks {
		dev := fmt.Sprintf("nvme,id=nvme%d,serial=%s,addr=%s", i, d.Serial, strings.TrimPrefix(d.Addr, "0000:00:"))
		if d.Warning != 0 {
			dev += fmt.Sprintf(",smart_critical_warning=%d", d.Warning)
		}
		if d.Subsys != "" {
			id, ok := subsys[d.Subsys]
			if !ok {
				id = fmt.Sprintf("subsys%d", i)
				subsys[d.Subsys] = id
				args = append(args, "-device", fmt.Sprintf("nvme-subsys,id=%s,nqn=%s", id, d.Subsys))
			}
			dev += ",subsys=" + id
		}
		args = append(args, "-device", dev)
		for j, mib := range d.SizesMiB {
			img := ImagePath(b.Dir, d, j+1)
			if _, err := os.Stat(img); err != nil {
				if err := sparse(img, int64(mib)<<20); err != nil {
					return nil, err
				}
			}
			id := fmt.Sprintf("d%dn%d", i, j+1)
			ns := fmt.Sprintf("nvme-ns,drive=%s,bus=nvme%d,nsid=%d,logical_block_size=%d,physical_block_size=%d", id, i, j+1, d.BlockSize, d.BlockSize)
			if slices.Contains(d.Detached, j+1) {
				if d.Subsys == "" {
					return nil, fmt.Errorf("disk %s: namespace %d detached without a subsystem", d.Serial, j+1)
				}
				ns += ",detached=true"
			}
			args = append(args, "-drive", fmt.Sprintf("file=%s,if=none,id=%s,format=raw,cache=unsafe", img, id), "-device", ns)
		}
	}
	g.args = append(args, b.QEMU...)
	g.timeout = b.Timeout
	if g.timeout == 0 {
		g.timeout = 5 * time.Minute
	}
	g.ctx, g.cancel = context.WithTimeout(ctx, g.timeout)
	g.cmd = exec.CommandContext(g.ctx, "qemu-system-x86_64", g.args...)
	g.cmd.Stdout, g.cmd.Stderr = &g.stderr, &g.stderr
	g.start = time.Now()
	if err := g.cmd.Start(); err != nil {
		g.cancel()
		return nil, err
	}
	g.done = make(chan struct{})
	go func() { g.waitErr = g.cmd.Wait(); close(g.done) }()
	return g, nil
}

// ReportSoFar is what the guest wrote to ttyS1 until now.
func (g *Guest) ReportSoFar() string {
	b, _ := os.ReadFile(g.Report)
	return string(b)
}

// Exited reports whether QEMU has exited.
func (g *Guest) Exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// Kill stops the guest at once.
func (g *Guest) Kill() { g.cancel() }

// Wait waits for the guest to power off (or its timeout) and collects
// what it reported.
func (g *Guest) Wait() (*Result, error) {
	<-g.done
	err := g.waitErr
	defer g.cancel()
	res := &Result{Accel: g.accel, Wall: time.Since(g.start), ExitCode: -1}
	c, _ := os.ReadFile(g.Console)
	r, _ := os.ReadFile(g.Report)
	rec, _ := os.ReadFile(g.Record)
	res.Console, res.Report, res.Record = string(c), string(r), string(rec)
	parse(res)
	if g.ctx.Err() == context.DeadlineExceeded {
		return res, fmt.Errorf("guest did not power off within %s (console %s, report %s)", g.timeout, g.Console, g.Report)
	}
	if err != nil {
		return res, fmt.Errorf("qemu-system-x86_64 %s: %w: %s", strings.Join(g.args, " "), err, g.stderr.String())
	}
	return res, nil
}

func parse(res *Result) {
	sc := bufio.NewScanner(strings.NewReader(res.Report))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(l, markBooted); ok {
			if s, err := strconv.ParseFloat(v, 64); err == nil {
				res.Booted = time.Duration(s * float64(time.Second))
			}
		}
		if v, ok := strings.CutPrefix(l, markExit); ok {
			if n, err := strconv.Atoi(v); err == nil {
				res.ExitCode = n
			}
		}
	}
}

// Failure is the guest's own failure line, "" when it reported none.
func (r *Result) Failure() string {
	for _, l := range strings.Split(r.Report, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), markFail); ok {
			return v
		}
	}
	return ""
}

func sparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func concat(dst string, srcs ...string) error {
	var all []byte
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			return err
		}
		all = append(all, b...)
	}
	return os.WriteFile(dst, all, 0o644)
}
