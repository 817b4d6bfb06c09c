//go:build kernelguest

package guest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/kernellane"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins"
)

// TestHiddenNamespace (booted by the host's TestGuestHiddenNamespace): a
// controller with namespace management in a two-controller subsystem
// whose NSID 2 is allocated but attached to no controller, as a tenant's
// created-then-detached namespace is. The nvme-format step must refuse
// it (ErrHiddenNamespaces naming NSID 2, quarantine, NSID 1 untouched),
// and so must the overwrite step and nvme-erase's overwrite fallback,
// which write only NSID 1 and would otherwise call the drive clean with
// NSID 2 as the tenant left it. Once NSID 2 is attached to the other
// controller only, the format, the overwrite and the fallback must go on,
// recording the check as done and NSID 2 as attached elsewhere.
// This runs scour's `nvme list-ctrl` parsing against nvme-cli, the kernel
// and QEMU's Identify CNS 12h, not against fakes.
func TestHiddenNamespace(t *testing.T) {
	m := kernellane.HiddenNamespaceMachine()
	d, other := m[0], m[1]
	if _, err := os.Stat(filepath.Join("/sys/bus/pci/devices", d.Addr)); err != nil {
		t.Skipf("no %s: this guest was not booted with kernellane.HiddenNamespaceMachine", d.Addr)
	}
	r := real(t)
	addr := hardware.Address(d.Addr)
	bindReal(t, r, d, "nvme")
	ctrl := ctrlName(t, d)

	// Without these bits scour's check does not run: the test would
	// prove nothing.
	out, err := exec.Command("nvme", "id-ctrl", "/dev/"+ctrl, "-o", "json").Output()
	if err != nil {
		t.Fatalf("nvme id-ctrl /dev/%s: %v", ctrl, err)
	}
	id, err := hardware.ParseIDCtrl(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s id-ctrl: oacs %#x cmic %#x", ctrl, id.OACS, id.CMIC)
	if id.OACS&8 == 0 || id.CMIC&2 == 0 {
		t.Fatalf("oacs %#x cmic %#x: want namespace management (oacs bit 3) and multiple controllers (cmic bit 1), else the hidden namespace check does not run", id.OACS, id.CMIC)
	}
	// A sanitize through this controller would reach the other
	// controller's namespaces too: discovery finds the shared subsystem
	// in sysfs and refuses a sanitize (QEMU offers none anyway).
	seen, err := r.Discover(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if seen.NVMe.Subsystem == "" || hardware.SubsystemSanitizeRefusal(addr, seen.NVMe) == nil {
		t.Fatalf("discovery of %s: subsystem %q, other controllers %v, cmic %#x: want the shared subsystem seen and a sanitize refused", addr, seen.NVMe.Subsystem, seen.NVMe.OtherControllers, seen.NVMe.CMIC)
	}
	t.Logf("%s: subsystem %s, other controllers %v: sanitize refused", ctrl, seen.NVMe.Subsystem, seen.NVMe.OtherControllers)
	// With the other port's controller on nvme too, sysfs lists it in the
	// same subsystem.
	bindReal(t, r, other, "nvme")
	peer := ctrlName(t, other)
	seen, err = r.Discover(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(seen.NVMe.OtherControllers, peer) {
		t.Fatalf("discovery of %s with %s on nvme: subsystem %q, other controllers %v: want %s", addr, other.Addr, seen.NVMe.Subsystem, seen.NVMe.OtherControllers, peer)
	}
	t.Logf("%s: subsystem %s, other controllers %v", ctrl, seen.NVMe.Subsystem, seen.NVMe.OtherControllers)
	bindReal(t, r, other, "vfio-pci")
	own := readCntlid(t, ctrl)
	all := cntlids(t, nvmeCLI(t, "list-ctrl", "/dev/"+ctrl))
	if len(all) != 2 || !slices.Contains(all, own) {
		t.Fatalf("subsystem controllers %v, want 2 with %s's cntlid %d", all, ctrl, own)
	}
	otherID := all[0]
	if otherID == own {
		otherID = all[1]
	}
	// What scour parses, as nvme-cli prints it here.
	if out := nvmeCLI(t, "list-ctrl", "/dev/"+ctrl, "--namespace-id=2"); !strings.HasPrefix(string(out), "num of ctrls present: 0\n") {
		t.Fatalf("nvme list-ctrl -n 2 before attaching: %q, want no controllers", out)
	}

	media, err := r.Media(ctx, addr)
	if err != nil || len(media) != 1 {
		t.Fatalf("media %v, %v: want NSID 1 alone (NSID 2 is detached)", media, err)
	}
	dev := media[0].Path
	writeAt(t, dev, tenant(d.Serial))

	// The real backend refuses, before formatting anything.
	details, err := r.FormatDetails(ctx, addr, dev, 1)
	if !errors.Is(err, hardware.ErrHiddenNamespaces) || !strings.Contains(err.Error(), "NSIDs 0x2 ") || details != nil {
		t.Fatalf("format %s: details %v, err %v; want ErrHiddenNamespaces naming NSID 0x2", dev, details, err)
	}
	t.Logf("refused: %v", err)
	if !readAll(t, dev, tenant(d.Serial)) {
		t.Fatalf("%s: the tenant's data is gone after a refused format", dev)
	}

	// So does the nvme-format step, from vfio-pci as on a passthrough
	// host: quarantine, the device back on vfio-pci, the data there.
	bindReal(t, r, d, "vfio-pci")
	res := formatStep(t, d)
	if res.Verdict != pipeline.VerdictQuarantine || res.Step != "format" || res.Code != plugins.CodePermanent || !strings.Contains(res.Reason, "NSIDs 0x2 ") {
		t.Fatalf("verdict %s at step %q code %d (%s); want quarantine at format, code %d, naming NSID 0x2", res.Verdict, res.Step, res.Code, res.Reason, plugins.CodePermanent)
	}
	bindReal(t, r, d, "nvme")
	if !readAll(t, dev, tenant(d.Serial)) {
		t.Fatalf("%s: the tenant's data is gone after the format step was refused", dev)
	}

	// An overwrite reaches only NSID 1 too: the real backend's check
	// refuses it, and so do the overwrite step and nvme-erase's overwrite
	// fallback, writing nothing.
	if details, err := r.CheckHiddenNamespaces(ctx, addr, "overwrite"); !errors.Is(err, hardware.ErrHiddenNamespaces) || !strings.Contains(err.Error(), "NSIDs 0x2 ") || details != nil {
		t.Fatalf("check before an overwrite of %s: details %v, err %v; want ErrHiddenNamespaces naming NSID 0x2", dev, details, err)
	}
	bindReal(t, r, d, "vfio-pci")
	for _, o := range overwrites(t, d) {
		res := oneStep(t, d, o.step, o.be)
		// QEMU's subsystem here has two controllers, so nvme-erase runs
		// the hidden-namespace check before it picks a technique (a
		// sanitize refused for sharing): its refusal says nothing was
		// erased rather than naming the overwrite.
		says := "overwrite"
		if o.shared {
			says = "nothing was erased"
		}
		if res.Verdict != pipeline.VerdictQuarantine || res.Step != "erase" || res.Code != plugins.CodePermanent || !strings.Contains(res.Reason, "NSIDs 0x2 ") || !strings.Contains(res.Reason, says) {
			t.Fatalf("%s: verdict %s at step %q code %d (%s); want quarantine at erase, code %d, naming NSID 0x2 and saying %q", o.name, res.Verdict, res.Step, res.Code, res.Reason, plugins.CodePermanent, says)
		}
		bindReal(t, r, d, "nvme")
		if !readAll(t, dev, tenant(d.Serial)) {
			t.Fatalf("%s: the tenant's data on %s is gone after the step was refused", o.name, dev)
		}
		bindReal(t, r, d, "vfio-pci")
	}
	bindReal(t, r, d, "nvme")

	// NSID 2 attached to the other controller only: another port's
	// namespace, not this device's.
	nvmeCLI(t, "attach-ns", "/dev/"+ctrl, "--namespace-id=2", "--controllers="+strconv.Itoa(otherID))
	out = nvmeCLI(t, "list-ctrl", "/dev/"+ctrl, "--namespace-id=2")
	if got := cntlids(t, out); !strings.HasPrefix(string(out), "num of ctrls present: 1\n") || !slices.Equal(got, []int{otherID}) {
		t.Fatalf("nvme list-ctrl -n 2 after attaching it to cntlid %d: %q", otherID, out)
	}
	if m, err := r.Media(ctx, addr); err != nil || len(m) != 1 {
		t.Fatalf("media %v, %v after attaching NSID 2 elsewhere: want NSID 1 alone", m, err)
	}

	bindReal(t, r, d, "vfio-pci")
	res = formatStep(t, d)
	if res.Verdict != pipeline.VerdictClean {
		t.Fatalf("verdict %s at step %q (%s); want clean", res.Verdict, res.Step, res.Reason)
	}
	fd := res.Steps[0].Details
	note, _ := fd[hardware.HiddenNamespacesNoteKey].(string)
	if fd[hardware.HiddenNamespacesCheckedKey] != true || !strings.Contains(note, "NSIDs 0x2 are attached to other controllers") {
		t.Fatalf("format step details %v: want %s true and a note naming NSID 0x2 as attached elsewhere", fd, hardware.HiddenNamespacesCheckedKey)
	}
	bindReal(t, r, d, "nvme")
	if readAll(t, dev, tenant(d.Serial)) {
		t.Fatalf("%s: clean verdict, yet the tenant's data is still there", dev)
	}

	// The overwrite and the fallback go on too, and say what they checked.
	for _, o := range overwrites(t, d) {
		writeAt(t, dev, tenant(d.Serial))
		bindReal(t, r, d, "vfio-pci")
		res := oneStep(t, d, o.step, o.be)
		if res.Verdict != pipeline.VerdictClean {
			t.Fatalf("%s: verdict %s at step %q (%s); want clean", o.name, res.Verdict, res.Step, res.Reason)
		}
		od := res.Steps[0].Details
		note, _ := od[hardware.HiddenNamespacesNoteKey].(string)
		if od[plugins.EraseKey] != "overwrite" || od[hardware.HiddenNamespacesCheckedKey] != true || !strings.Contains(note, "NSIDs 0x2 are attached to other controllers") {
			t.Fatalf("%s: step details %v: want an overwrite, %s true and a note naming NSID 0x2 as attached elsewhere", o.name, od, hardware.HiddenNamespacesCheckedKey)
		}
		bindReal(t, r, d, "nvme")
		if readAll(t, dev, tenant(d.Serial)) {
			t.Fatalf("%s: clean verdict, yet the tenant's data is still on %s", o.name, dev)
		}
	}
	bindReal(t, r, d, "vfio-pci")

	// The cntlid attached to is the other PCI function's: bound to nvme,
	// it shows NSID 2.
	bindReal(t, r, other, "nvme")
	oc := ctrlName(t, other)
	if got := readCntlid(t, oc); got != otherID {
		t.Fatalf("%s (%s) has cntlid %d, want %d", other.Addr, oc, got, otherID)
	}
	if active := string(nvmeCLI(t, "list-ns", "/dev/"+oc)); !strings.Contains(active, ":0x2\n") {
		t.Fatalf("nvme list-ns on %s: %q, want NSID 2 active", oc, active)
	}
	// With both controllers on nvme the kernel has a block device for
	// NSID 2 in the subsystem; it is still not this device's.
	bindReal(t, r, d, "nvme")
	if m, err := r.Media(ctx, addr); err != nil || len(m) != 1 || m[0].Path != dev {
		t.Fatalf("media of %s with %s on nvme too: %v, %v; want %s alone", d.Addr, other.Addr, m, err, dev)
	}
	bindReal(t, r, d, "vfio-pci")
	bindReal(t, r, other, "vfio-pci")
}

// formatStep runs the nvme-format step (user-data erase) on d through the
// engine and a claims store of its own: see oneStep.
func formatStep(t *testing.T, d kernellane.Disk) *pipeline.Result {
	t.Helper()
	return oneStep(t, d, "{name: format, type: nvme-format, driver: nvme, args: {crypto: false}}", real(t))
}

// overwrite is a pipeline step that ends in an overwrite of d, and the
// backend to run it on.
type overwrite struct {
	name, step string
	be         hardware.Backend
	shared     bool // the step checks before it picks a technique (a shared subsystem)
}

// overwrites are the two ways a pipeline overwrites d: the overwrite
// step, and nvme-erase's overwrite fallback, reached here by declaring
// that d's controller has no Format NVM (hardware.device_capabilities
// nvme.format: false; QEMU's has no sanitize).
func overwrites(t *testing.T, d kernellane.Disk) []overwrite {
	t.Helper()
	noFormat, err := hardware.NewReal(hardware.Config{Backend: hardware.BackendReal,
		DeviceCapabilities: map[string]hardware.RawValues{d.Addr: {"nvme.format": false}}}, hardware.WithLogger(logger()))
	if err != nil {
		t.Fatal(err)
	}
	return []overwrite{
		{name: "overwrite step", step: "{name: erase, type: overwrite, driver: nvme}", be: real(t)},
		{name: "nvme-erase overwrite fallback", step: "{name: erase, type: nvme-erase, driver: nvme, args: {crypto: false}}", be: noFormat, shared: true},
	}
}

// oneStep runs a pipeline of step alone on d through the engine on be
// and a claims store of its own, and checks the stored run and that d is
// back on vfio-pci.
func oneStep(t *testing.T, d kernellane.Disk, step string, be hardware.Backend) *pipeline.Result {
	t.Helper()
	cfg, err := pipeline.ParseConfig([]byte(`
profiles:
  - name: nvme
    match: {kinds: [nvme]}
    pipeline:
      name: one-step
      version: 1
      steps:
        - ` + step + `
`))
	if err != nil {
		t.Fatal(err)
	}
	e, store := engineOn(t, cfg, be)
	res, err := e.Clean(ctx, target(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s (%s) steps %s", d.Addr, res.Verdict, res.Reason, steps(res))
	run, err := store.GetRun(ctx, res.RunID)
	if err != nil {
		t.Fatalf("run %s not in the claims store: %v", res.RunID, err)
	}
	if want := map[pipeline.Verdict]claims.RunState{pipeline.VerdictClean: claims.RunCleaned, pipeline.VerdictQuarantine: claims.RunQuarantined}[res.Verdict]; run.State != want {
		t.Errorf("stored run state %s for verdict %s", run.State, res.Verdict)
	}
	if drv := driver(d.Addr); drv != "vfio-pci" {
		t.Errorf("left bound to %q, want vfio-pci as before the run", drv)
	}
	if len(res.Steps) != 1 {
		t.Fatalf("steps %s, want %s alone", steps(res), step)
	}
	return res
}

// bindReal binds d to drv with the real backend, whose BindDriver waits
// for the namespaces on nvme; bind's own wait (namespaces) looks for
// block devices in the controller's sysfs folder, which a multipath
// controller lacks.
func bindReal(t *testing.T, r *hardware.Real, d kernellane.Disk, drv string) {
	t.Helper()
	if _, err := r.BindDriver(ctx, hardware.Address(d.Addr), drv); err != nil {
		t.Fatalf("bind %s (%s) to %s: %v", d.Addr, d.Serial, drv, err)
	}
}

// ctrlName is d's controller (nvmeN), d bound to nvme.
func ctrlName(t *testing.T, d kernellane.Disk) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join("/sys/bus/pci/devices", d.Addr, "nvme", "nvme*"))
	if len(m) != 1 {
		t.Fatalf("%s: controllers %v, want one", d.Addr, m)
	}
	return filepath.Base(m[0])
}

func readCntlid(t *testing.T, ctrl string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/nvme", ctrl, "cntlid"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ctrlEntry is an entry of `nvme list-ctrl`: "[   1]:0x1" (0 prints as "0").
var ctrlEntry = regexp.MustCompile(`(?m)^\[\s*\d+\]:(0x[0-9a-fA-F]+|\d+)$`)

func cntlids(t *testing.T, out []byte) []int {
	t.Helper()
	var ids []int
	for _, m := range ctrlEntry.FindAllSubmatch(out, -1) {
		n, err := strconv.ParseUint(string(m[1]), 0, 16)
		if err != nil {
			t.Fatalf("list-ctrl entry %q: %v", m[0], err)
		}
		ids = append(ids, int(n))
	}
	return ids
}

func nvmeCLI(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("nvme", args...).CombinedOutput()
	t.Logf("nvme %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("nvme %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// writeAt writes data (4 KiB) with O_DIRECT at the start, middle and end
// of dev and reads it back.
func writeAt(t *testing.T, dev string, data []byte) {
	t.Helper()
	buf := aligned(t, len(data))
	copy(buf, data)
	f, err := os.OpenFile(dev, os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range offsets(t, dev) {
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatalf("write %s at %d: %v", dev, off, err)
		}
	}
	if !readAll(t, dev, data) {
		t.Fatalf("%s: data not readable right after writing it", dev)
	}
}

// readAll reports whether dev holds data at every offset writeAt wrote
// it; it fails the test when some hold data and others do not, or a
// block is neither data nor zeros.
func readAll(t *testing.T, dev string, data []byte) bool {
	t.Helper()
	buf := aligned(t, len(data))
	f, err := os.OpenFile(dev, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := 0
	offs := offsets(t, dev)
	for _, off := range offs {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatalf("read %s at %d: %v", dev, off, err)
		}
		switch {
		case bytes.Equal(buf, data):
			found++
		case len(bytes.Trim(buf, "\x00")) != 0:
			t.Fatalf("%s at %d: neither the data nor zeros: %q", dev, off, buf[:64])
		}
	}
	if found != 0 && found != len(offs) {
		t.Fatalf("%s: data at %d of %d offsets", dev, found, len(offs))
	}
	return found == len(offs)
}
