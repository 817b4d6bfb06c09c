package hardware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/scour-project/scour/internal/testkit"
)

// toolFixtures answers the tool runs of a host with the recorded outputs.
func toolFixtures(t *testing.T) map[string]string {
	return map[string]string{
		"nvme list -v -o json":                 string(fixture(t, "nvme-list-v.json")),
		"nvme id-ctrl /dev/nvme0 -o json":      string(fixture(t, "id-ctrl-samsung-pm9a3.json")),
		"nvme id-ctrl /dev/nvme1 -o json":      string(fixture(t, "id-ctrl-kioxia-cm6.json")),
		"nvme smart-log /dev/nvme0 -o json":    string(fixture(t, "smart-log-samsung-pm9a3.json")),
		"nvme list-ns /dev/nvme0":              "[   0]:0x1\n",
		"nvme list-ns /dev/nvme0 --all":        "[   0]:0x1\n",
		"nvme list-ns /dev/nvme1":              "[   0]:0x1\n[   1]:0x2\n",
		"nvme list-ns /dev/nvme1 --all":        "[   0]:0x1\n[   1]:0x2\n",
		"nvme smart-log /dev/nvme1 -o json":    string(fixture(t, "smart-log-kioxia-cm6-worn.json")),
		"devlink dev info pci/0000:3b:00.0 -j": string(fixture(t, "devlink-info-cx6dx.json")),
		"nvidia-smi --query-gpu=" + NvidiaSMIQuery + " --format=csv,noheader,nounits": string(fixture(t, "nvidia-smi-a100.csv")),
	}
}

func fixtureRunner(t *testing.T, extra func(cmd string) ([]byte, error, bool)) *FakeRunner {
	outs := toolFixtures(t)
	return &FakeRunner{RunF: func(ctx context.Context, name string, args ...string) ([]byte, error) {
		cmd := strings.Join(append([]string{name}, args...), " ")
		if extra != nil {
			if out, err, ok := extra(cmd); ok {
				return out, err
			}
		}
		if out, ok := outs[cmd]; ok {
			return []byte(out), nil
		}
		return nil, &ToolError{Cmd: cmd, ExitCode: 1, Stderr: "no fixture for this command"}
	}}
}

func newTestReal(t *testing.T, cfg Config, r Runner, opts ...Option) *Real {
	t.Helper()
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = string(fakeSys(t))
	}
	b, err := NewReal(cfg, append([]Option{WithRunner(r)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRealDiscover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newTestReal(t, Config{}, fixtureRunner(t, nil))

	d, err := b.Discover(ctx, "0000:01:00.0")
	if err != nil {
		t.Fatal(err)
	}
	want := &Device{
		Address: "0000:01:00.0", Kind: KindNVMe, VendorID: "0x144d", DeviceID: "0xa80a", SubsystemVendor: "0x144d", SubsystemDevice: "0xa813",
		Class: "0x010802", Driver: "nvme", IOMMUGroup: intp(14), NUMANode: intp(0), ResetAvailable: true,
		Model: "SAMSUNG MZQL23T8HCLS-00A07", Serial: "S64GNE0R600123", Firmware: "GDC5602Q",
		NVMe: &NVMeInfo{Controller: "nvme0", Namespaces: []string{"/dev/nvme0n1"}, OACS: 95, FNA: 4, SANICAP: 1610612739,
			Smart: &SmartLog{PercentUsed: 3, AvailSpare: 100, SpareThresh: 10}},
		Capabilities: Capabilities{
			"kind": Set("nvme"), "pci.vendor": Set("0x144d"), "pci.device": Set("0xa80a"), "pci.class": Set("0x010802"),
			"pci.driver": Set("nvme"), "pci.reset": Bool(true), "pci.iommu": Bool(true), "pci.sriov": Bool(false),
			"pci.numa_node": Set("0"), "nvme.block_device": Bool(true), "nvme.format": Bool(true), "nvme.crypto_format": Bool(true),
			"nvme.sanitize": Ordered("block", "crypto"), "nvme.firmware": Ordered("GDC5602Q"), "nvme.model": Set("SAMSUNG MZQL23T8HCLS-00A07"),
			"nvme.percent_used": Ordered("3"), "nvme.critical_warning": Bool(false), "nvme.spare_ok": Bool(true),
		},
		Absent: map[string]string{},
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("PM9A3 (-want +got):\n%s", diff)
	}

	worn, err := b.Discover(ctx, "0000:81:00.0")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]Value{
		"nvme.sanitize": Ordered("overwrite", "block"), "nvme.crypto_format": Bool(false),
		"nvme.percent_used": Ordered("104"), "nvme.critical_warning": Bool(true), "nvme.spare_ok": Bool(false),
	} {
		if diff := cmp.Diff(v, worn.Capabilities[name]); diff != "" {
			t.Errorf("CM6 %s (-want +got):\n%s", name, diff)
		}
	}
	if diff := cmp.Diff([]string{"/dev/nvme1n1", "/dev/nvme1n2"}, worn.NVMe.Namespaces); diff != "" {
		t.Errorf("CM6 namespaces (-want +got):\n%s", diff)
	}

	gpu, err := b.Discover(ctx, "0000:41:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&GPUInfo{Name: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, DriverVer: "535.129.03", ECCSupported: true, ResetSupport: true}, gpu.GPU); diff != "" {
		t.Errorf("GPU (-want +got):\n%s", diff)
	}
	if !gpu.Capabilities["gpu.ecc"].Equal(Bool(true)) || !gpu.Capabilities["gpu.scrub"].Equal(Bool(false)) || len(gpu.Absent) != 0 {
		t.Errorf("GPU capabilities %v absent %v", gpu.Capabilities, gpu.Absent)
	}

	nic, err := b.Discover(ctx, "0000:3b:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if nic.Firmware != "22.31.1014" || !cmp.Equal(nic.Capabilities["nic.firmware.fw"], Ordered("22.31.1014")) || !nic.Capabilities["pci.sriov"].Equal(Bool(true)) {
		t.Errorf("NIC: firmware %q caps %v", nic.Firmware, nic.Capabilities)
	}

	if _, err := b.Discover(ctx, "0000:99:00.0"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("unknown device: %v", err)
	}
}

func TestRealDiscoverVFIOBound(t *testing.T) {
	t.Parallel()
	r := fixtureRunner(t, nil)
	b := newTestReal(t, Config{}, r)
	d, err := b.Discover(context.Background(), "0000:02:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if !d.NVMe.BoundToVFIO || d.NVMe.Controller != "" || len(d.NVMe.Namespaces) != 0 {
		t.Errorf("NVMe info %+v, want bound to vfio with no controller", d.NVMe)
	}
	if !d.Capabilities["nvme.block_device"].Equal(Bool(false)) || !cmp.Equal(d.Capabilities["pci.driver"], Set("vfio-pci")) {
		t.Errorf("capabilities %v", d.Capabilities)
	}
	if _, ok := d.Capabilities["nvme.sanitize"]; ok {
		t.Error("nvme.sanitize discovered for a vfio-bound device")
	}
	if why := d.Absent["nvme.sanitize"]; !strings.Contains(why, `bound to "vfio-pci"`) {
		t.Errorf("absent reason %q", why)
	}
	if calls := r.Calls(); len(calls) != 0 {
		t.Errorf("tools run for a vfio-bound NVMe: %v", calls)
	}
	if _, err := b.Media(context.Background(), "0000:02:00.0"); !errors.Is(err, ErrWrongDriver) {
		t.Errorf("Media of vfio-bound device: %v, want ErrWrongDriver", err)
	}
}

func TestRealDiscoverToolsMissingFailingHanging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// No tools at all: sysfs still names controller, namespaces, model.
	missing := newTestReal(t, Config{}, &FakeRunner{})
	d, err := missing.Discover(ctx, "0000:81:00.0")
	if err != nil {
		t.Fatalf("missing tools made discovery fail: %v", err)
	}
	if d.NVMe.Controller != "nvme1" || len(d.NVMe.Namespaces) != 2 || d.Model != "KIOXIA KCM6XRUL3T84" {
		t.Errorf("sysfs fallback: %+v model %q", d.NVMe, d.Model)
	}
	if why := d.Absent["nvme.sanitize"]; why != "nvme id-ctrl not installed" {
		t.Errorf("absent reason %q", why)
	}
	if why := d.Absent["nvme.percent_used"]; why != "nvme smart-log not installed" {
		t.Errorf("absent reason %q", why)
	}
	if _, ok := d.Capabilities["nvme.sanitize"]; ok {
		t.Error("nvme.sanitize present without nvme-cli")
	}
	if !d.Capabilities["nvme.model"].Equal(Set("KIOXIA KCM6XRUL3T84")) {
		t.Errorf("model from sysfs lost: %v", d.Capabilities["nvme.model"])
	}
	g, _ := missing.Discover(ctx, "0000:41:00.0")
	if g.Absent["gpu.ecc"] != "nvidia-smi not installed" || !g.Capabilities["gpu.reset"].Equal(Bool(true)) {
		t.Errorf("GPU without nvidia-smi: absent %v caps %v", g.Absent, g.Capabilities)
	}
	n, _ := missing.Discover(ctx, "0000:3b:00.0")
	if n.Absent["nic.firmware.*"] != "devlink dev info not installed" {
		t.Errorf("NIC without devlink: absent %v", n.Absent)
	}

	// id-ctrl fails: the reason carries the tool's stderr.
	failing := newTestReal(t, Config{}, fixtureRunner(t, func(cmd string) ([]byte, error, bool) {
		if strings.HasPrefix(cmd, "nvme id-ctrl") {
			return nil, &ToolError{Cmd: cmd, ExitCode: 1, Stderr: "NVMe status: INVALID_FIELD"}, true
		}
		return nil, nil, false
	}))
	d, err = failing.Discover(ctx, "0000:01:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if why := d.Absent["nvme.format"]; !strings.Contains(why, "nvme id-ctrl failed") || !strings.Contains(why, "INVALID_FIELD") {
		t.Errorf("absent reason %q", why)
	}
	if _, ok := d.Capabilities["nvme.format"]; ok {
		t.Error("nvme.format set although id-ctrl failed: unknown must be absent, not false")
	}
	if !d.Capabilities["nvme.spare_ok"].Equal(Bool(true)) {
		t.Error("smart-log facts lost because id-ctrl failed")
	}

	// smart-log hangs: the per-tool timeout ends it, discovery goes on.
	hang := func(cmd string) ([]byte, error, bool) { return nil, nil, false }
	var hangRunner *FakeRunner
	hangRunner = fixtureRunner(t, hang)
	inner := hangRunner.RunF
	hangRunner.RunF = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if len(args) > 0 && args[0] == "smart-log" {
			<-ctx.Done()
			return nil, fmt.Errorf("nvme smart-log: killed: %w", ctx.Err())
		}
		return inner(ctx, name, args...)
	}
	hanging := newTestReal(t, Config{ToolTimeout: 50 * time.Millisecond}, hangRunner)
	d, err = hanging.Discover(ctx, "0000:01:00.0")
	if err != nil {
		t.Fatal(err)
	}
	if why := d.Absent["nvme.percent_used"]; !strings.Contains(why, "timed out") {
		t.Errorf("absent reason %q", why)
	}
	if !d.Capabilities["nvme.format"].Equal(Bool(true)) {
		t.Error("id-ctrl facts lost because smart-log hung")
	}
	// The caller's own deadline passing is an error, not an absence.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := hanging.Discover(short, "0000:01:00.0"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Discover past the caller's deadline: %v", err)
	}
}

func TestRealDeclaredCapabilities(t *testing.T) {
	t.Parallel()
	var logs testkit.SyncBuffer
	cfg := Config{
		HostCapabilities: RawValues{"custom.rack": "r12", "custom.flag": true, "gpu.turbo": true},
		DeviceCapabilities: map[string]RawValues{
			"0000:01:00.0": {"custom.rack": "r13", "nvme.sanitize": []any{"crypto", "overwrite"}, "nvme.wibble": "x"},
		},
	}
	b := newTestReal(t, cfg, fixtureRunner(t, nil), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	d, err := b.Discover(context.Background(), "0000:01:00.0")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]Value{
		"custom.rack":   Ordered("r13"), // device overrides host
		"custom.flag":   Bool(true),
		"nvme.sanitize": Ordered("overwrite", "crypto"), // declared overrides discovered, sorted on the scale
	} {
		if diff := cmp.Diff(want, d.Capabilities[name]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	for _, name := range []string{"gpu.turbo", "nvme.wibble"} {
		if _, ok := d.Capabilities[name]; ok {
			t.Errorf("unknown capability %s was not ignored", name)
		}
		if !strings.Contains(logs.String(), "capability="+name) || !strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("no warning logged for %s; logs:\n%s", name, logs.String())
		}
	}
}

func TestRealLogsAbsentReasonOnce(t *testing.T) {
	t.Parallel()
	var logs testkit.SyncBuffer
	b := newTestReal(t, Config{}, fixtureRunner(t, nil), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 3 {
		if _, err := b.Discover(context.Background(), "0000:02:00.0"); err != nil {
			t.Fatal(err)
		}
	}
	n := strings.Count(logs.String(), "capability=nvme.sanitize")
	if n != 1 {
		t.Errorf("absent reason for nvme.sanitize logged %d times over 3 discoveries, want 1:\n%s", n, logs.String())
	}
}
