package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline"
	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/plugins/runner"
)

func init() {
	register(func(c *cli) *cobra.Command {
		var f pluginTestFlags
		test := &cobra.Command{
			Use:   "test PATH --device ADDR",
			Short: "test a cleaning plugin against a simulated device",
			Long:  pluginHelp,
			Args:  exactArgs(1, "the plugin's PATH"),
			RunE: func(cmd *cobra.Command, args []string) error {
				t := &pluginTest{out: c.stdout}
				t.run(cmd.Context(), args[0], f)
				fmt.Fprintf(c.stdout, "\n%d passed, %d failed, %d warnings\n", t.passed, t.failed, t.warned)
				if t.failed > 0 {
					return exitCode(1)
				}
				return nil
			},
		}
		fs := test.Flags()
		fs.StringVar(&f.device, "device", "", "PCI address of the simulated device (required; refused when a PCI device of this host is at it)")
		fs.StringVar(&f.kind, "kind", "nvme", "device kind: nvme, gpu, nic or generic")
		fs.StringVar(&f.vendor, "vendor", "0x144d", "PCI vendor id")
		fs.StringVar(&f.product, "product", "0xa80a", "PCI device id")
		fs.StringVar(&f.rp, "rp", "00000000-0000-0000-0000-000000000001", "resource provider UUID to pass")
		fs.StringVar(&f.args, "args", "{}", "step args as a JSON object, as the pipeline config would give them")
		fs.Int64Var(&f.mediaBytes, "media-bytes", 4<<20, "size of each simulated media file")
		fs.IntVar(&f.media, "media", 1, "number of simulated media files (0: a device without media)")
		fs.BoolVar(&f.noClean, "no-clean", false, "run VERSION and CHECK only")
		fs.BoolVar(&f.verifies, "verifies", false, "the step is configured with verifies: true: CLEAN must report a passed details.verification")
		fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "limit for CLEAN")
		fs.StringVar(&f.simConfig, "sim-config", "", "scour config whose hardware: section is the simulator; the device comes from it (its media are the simulator's files)")
		_ = test.MarkFlagRequired("device")
		return group("plugin", "test a cleaning plugin against a simulated device (plugin test PATH --device ADDR)", pluginHelp, test)
	})
}

const pluginHelp = `Runs the plugin at PATH the way scour would (same permission rules, minimal
environment, process group, bounded output) against a simulated device
whose media are temporary files filled with 0xab, and checks VERSION, CHECK
and CLEAN answers against the plugin protocol (docs/plugins.md). CHECK must
not modify the media. The plugin gets --device as SCOUR_PCI_ADDRESS, so
plugin test refuses, before running the plugin at all, an address at which
this host's sysfs lists a PCI device (or a sysfs it cannot read), with or
without --sim-config. Exit status 0 when every check passed.`

type pluginTestFlags struct {
	device     string
	kind       string
	vendor     string
	product    string
	rp         string
	args       string
	mediaBytes int64
	media      int
	noClean    bool
	verifies   bool
	timeout    time.Duration
	simConfig  string
}

type pluginTest struct {
	out                    io.Writer
	passed, failed, warned int
}

func (t *pluginTest) pass(format string, a ...any) {
	t.passed++
	fmt.Fprintf(t.out, "PASS  "+format+"\n", a...)
}

func (t *pluginTest) fail(format string, a ...any) {
	t.failed++
	fmt.Fprintf(t.out, "FAIL  "+format+"\n", a...)
}

func (t *pluginTest) warn(format string, a ...any) {
	t.warned++
	fmt.Fprintf(t.out, "WARN  "+format+"\n", a...)
}

func (t *pluginTest) run(ctx context.Context, path string, f pluginTestFlags) {
	abs, err := filepath.Abs(path)
	if err != nil {
		t.fail("plugin path %s: %v", path, err)
		return
	}
	addr, err := hardware.ParseAddress(f.device)
	if err != nil {
		t.fail("--device: %v", err)
		return
	}
	// Before the plugin runs at all (VERSION included): whatever the
	// simulated device, the plugin gets its address, and one that works
	// by address would act on the real device there.
	if why := realDeviceAt(hardware.NewFS(pluginTestSysfs), addr); why != "" {
		t.fail("--device %s: %s; plugin test never hands a plugin the address of a device of this host (it may be a tenant's): "+
			"give --device an address no PCI device of this host has (ls /sys/bus/pci/devices), and in --sim-config too", addr, why)
		return
	}
	var stepArgs map[string]any
	if err := json.Unmarshal([]byte(f.args), &stepArgs); err != nil {
		t.fail("--args is not a JSON object: %v", err)
		return
	}
	// The plugin's own directory stands in for plugin_dirs; the same
	// ownership and mode rules apply as in scour.
	if err := runner.CheckFile(abs, []string{filepath.Dir(abs)}); err != nil {
		t.fail("permissions: %v", err)
		return
	}
	t.pass("permissions: regular file, root-owned, not group/world-writable, in a root-owned directory")
	r, err := runner.New(runner.Config{Dirs: []string{filepath.Dir(abs)}, Timeout: f.timeout})
	if err != nil {
		t.fail("%v", err)
		return
	}
	version, err := r.Version(ctx, abs)
	if err != nil {
		t.fail("VERSION: %v%s", err, stderrOf(err))
		return
	}
	t.pass("VERSION: speaks protocol %s", version)

	dir, err := os.MkdirTemp("", "scourctl-plugin-test-")
	if err != nil {
		t.fail("%v", err)
		return
	}
	defer os.RemoveAll(dir)
	var req *plugins.Request
	if f.simConfig != "" {
		req, err = simRequest(ctx, f.simConfig, addr, f, stepArgs)
	} else {
		req, err = fakeRequest(dir, addr, f, stepArgs)
	}
	if err != nil {
		t.fail("preparing the simulated device: %v", err)
		return
	}
	d := req.Device
	fmt.Fprintf(t.out, "      simulated device %s (%s %s:%s, driver %s), %d media\n", addr, d.Kind, d.VendorID, d.DeviceID, d.Driver, len(d.Media))
	t.check(ctx, r, abs, version, req)
	if f.noClean {
		return
	}
	t.clean(ctx, r, abs, version, req, f.verifies)
}

func (t *pluginTest) check(ctx context.Context, r *runner.Runner, path, version string, req *plugins.Request) {
	before := mediaSum(req.Device.Media)
	res, err := r.Check(ctx, path, version, req)
	switch {
	case plugins.CodeOf(err) == plugins.CodeUnsupported:
		t.pass("CHECK: answers unsupported (code 2): %s (a step with on_unsupported: skip would be skipped)", plugins.AsError(err).Msg)
	case err != nil:
		t.fail("CHECK: %v%s", err, stderrOf(err))
	default:
		t.pass("CHECK: ok %v", res.Details)
	}
	if !bytes.Equal(before, mediaSum(req.Device.Media)) {
		t.fail("CHECK modified the media: CHECK must be read-only")
	}
	t.codeRange("CHECK", err)
}

func (t *pluginTest) clean(ctx context.Context, r *runner.Runner, path, version string, req *plugins.Request, verifies bool) {
	var progress []float64
	start := time.Now()
	res, err := r.Clean(ctx, path, version, req, func(f float64) { progress = append(progress, f) })
	if err != nil {
		pe := plugins.AsError(err)
		t.codeRange("CLEAN", err)
		if pe.Code == plugins.CodeProtocol || pe.Code == plugins.CodeTimeout {
			t.fail("CLEAN: %v%s", err, stderrOf(err))
			return
		}
		t.warn("CLEAN answered a protocol error (valid, but the device would not be clean): %v%s", err, stderrOf(err))
		return
	}
	t.pass("CLEAN: ok in %s, details %v", time.Since(start).Round(time.Millisecond), res.Details)
	t.verification(res.Details, verifies)
	t.technique(res.Details, verifies)
	if len(progress) == 0 {
		t.warn("CLEAN printed no progress lines ({\"progress\": 0.5} on stdout before the result)")
	} else {
		t.pass("CLEAN: %d progress lines, last %.2f", len(progress), progress[len(progress)-1])
	}
	for _, m := range req.Device.Media {
		if zero, err := allZero(m.Path); err != nil {
			t.warn("media %s: %v", m.Path, err)
		} else if !zero {
			t.warn("media %s is not all zeros after CLEAN (fine if the plugin is not a wipe)", m.Path)
		} else {
			t.pass("media %s is all zeros after CLEAN", m.Path)
		}
	}
	if res.Stderr != "" {
		fmt.Fprintf(t.out, "      stderr:\n%s\n", indent(res.Stderr))
	}
}

// verification judges CLEAN's details.verification as scour does
// (plugins.JudgeVerification): an ok answer with a verification that did
// not pass, or none from a step that verifies, fails the step in scour,
// and so fails here.
func (t *pluginTest) verification(details map[string]any, verifies bool) {
	result, present := plugins.VerificationResult(details)
	switch j, why := plugins.JudgeVerification(details, verifies); {
	case j == plugins.Refused:
		t.fail("CLEAN answered status ok, but %s: scour fails such a step permanently (code %d) and quarantines the device; "+
			"a verification that did not pass is an error answer (exit non-zero, with details.verification in its details)", why, plugins.CodePermanent)
	case j == plugins.NotVerifiable:
		t.warn("CLEAN: verification not applicable (%s): scour records the step skipped, proving nothing; a purge pipeline's run is then not returned", why)
	case present && !verifies:
		t.warn("CLEAN reports a verification (%s) but --verifies was not given: configure the step with verifies: true (and test with --verifies) so a purge pipeline counts it", result)
	case present:
		t.pass("CLEAN: verification %s", result)
	}
}

// technique warns when CLEAN of a step that may be a pipeline's erase
// (plugins are destructive by default; one with verifies: true erases
// nothing) reports no details.technique: a clear or purge pipeline's run
// counts the erase only with one, and is quarantined without another.
func (t *pluginTest) technique(details map[string]any, verifies bool) {
	if verifies {
		return
	}
	if tech, _ := details[plugins.TechniqueKey].(string); tech != "" {
		t.pass("CLEAN: reports details.technique %q", tech)
		return
	}
	t.warn("CLEAN reports no details.technique: in a clear or purge pipeline this step's erase does not count without one, and a run with no other erase is quarantined; " +
		`report the technique applied, in words ("overwrite, 1 pass of 0x00"), or, if the plugin erases nothing, configure its step with destructive: false`)
}

// codeRange warns about error codes in the reserved range that the
// protocol does not define.
func (t *pluginTest) codeRange(cmd string, err error) {
	if err == nil {
		return
	}
	switch c := plugins.CodeOf(err); {
	case c >= plugins.CodePluginMin:
	case c >= 1 && c <= 4, c >= 11 && c <= 15:
	default:
		t.warn("%s: error code %d is reserved but undefined; use 100+ for plugin-specific codes", cmd, c)
	}
}

// simRequest describes addr as the simulator (and so scour) would.
func simRequest(ctx context.Context, path string, addr hardware.Address, f pluginTestFlags, args map[string]any) (*plugins.Request, error) {
	doc, err := readScourConfig(path)
	if err != nil {
		return nil, err
	}
	if doc.Hardware.Backend != hardware.BackendSimulated {
		return nil, fmt.Errorf("%s: hardware.backend is %q: plugin test runs CLEAN, so it only works against the simulator", path, doc.Hardware.Backend)
	}
	be, err := backendFor(doc.Hardware)
	if err != nil {
		return nil, err
	}
	dev, err := be.Discover(ctx, addr)
	if err != nil {
		return nil, err
	}
	req, err := pipeline.NewRequest(ctx, be, pipeline.Target{Address: addr, RPUUID: f.rp}, "plugin-test", args, dev, true)
	if err != nil {
		return nil, fmt.Errorf("%s: building the plugin request for %s: %w", path, addr, err)
	}
	req.Previous = &plugins.Previous{Instance: "00000000-0000-0000-0000-00000000abcd", Project: "plugin-test"}
	return req, nil
}

// pluginTestSysfs is the sysfs plugin test reads to tell whether a PCI
// device is at --device (tests point it at a fake tree).
var pluginTestSysfs = hardware.DefaultSysfsRoot

// realDeviceAt says why addr may be a real PCI device of this host (""
// when sysfs lists none there). A sysfs that cannot be read counts as a
// device there: plugin test cannot tell, so it refuses.
func realDeviceAt(fs hardware.FS, addr hardware.Address) string {
	addrs, err := fs.PCIAddresses()
	if err != nil {
		return fmt.Sprintf("cannot tell whether a PCI device of this host is at that address (%v)", err)
	}
	path := fs.Path("bus", "pci", "devices", string(addr))
	_, err = os.Lstat(path)
	switch {
	case err == nil || slices.Contains(addrs, addr):
		return fmt.Sprintf("this host's hardware discovery finds a PCI device there (%s)", path)
	case !errors.Is(err, iofs.ErrNotExist):
		return fmt.Sprintf("cannot tell whether a PCI device of this host is at that address (%v)", err)
	}
	return ""
}

func fakeRequest(dir string, addr hardware.Address, f pluginTestFlags, args map[string]any) (*plugins.Request, error) {
	req := &plugins.Request{Step: "plugin-test", Args: args,
		Device: plugins.Device{Address: string(addr), Kind: f.kind, VendorID: f.vendor, DeviceID: f.product,
			Driver: "vfio-pci", Capabilities: map[string]any{"kind": []string{f.kind}}},
		ResourceProvider: plugins.ResourceProvider{UUID: f.rp},
		Previous:         &plugins.Previous{Instance: "00000000-0000-0000-0000-00000000abcd", Project: "plugin-test"}}
	for i := range f.media {
		p := filepath.Join(dir, fmt.Sprintf("media%d", i))
		if err := os.WriteFile(p, bytes.Repeat([]byte{0xab}, int(f.mediaBytes)), 0o600); err != nil {
			return nil, err
		}
		req.Device.Media = append(req.Device.Media, plugins.Media{Path: p, Size: f.mediaBytes})
	}
	return req, nil
}

func mediaSum(ms []plugins.Media) []byte {
	h := sha256.New()
	for _, m := range ms {
		if fh, err := os.Open(m.Path); err == nil {
			io.Copy(h, fh)
			fh.Close()
		}
	}
	return h.Sum(nil)
}

func allZero(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	return bytes.Count(b, []byte{0}) == len(b), nil
}

func stderrOf(err error) string {
	if s := plugins.AsError(err).Stderr; s != "" {
		return "\n      stderr:\n" + indent(s)
	}
	return ""
}

func indent(s string) string {
	return "        " + string(bytes.ReplaceAll(bytes.TrimRight([]byte(s), "\n"), []byte("\n"), []byte("\n        ")))
}
