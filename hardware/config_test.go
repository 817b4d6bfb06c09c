package hardware

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

func TestConfigYAMLAndDefaults(t *testing.T) {
	t.Parallel()
	var doc struct {
		Hardware Config `yaml:"hardware"`
	}
	if err := yaml.Unmarshal([]byte("hardware: simulated\n"), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Hardware.Backend != BackendSimulated {
		t.Errorf("short form: backend %q", doc.Hardware.Backend)
	}
	src := `
hardware:
  sysfs_root: /host/sys
  host_capabilities: {custom.rack: r12}
  device_capabilities:
    "0000:81:00.0": {nic.firmware.fw: 22.10, custom.gold: true, nvme.sanitize: [crypto, block]}
`
	var full struct {
		Hardware Config `yaml:"hardware"`
	}
	if err := yaml.Unmarshal([]byte(src), &full); err != nil {
		t.Fatal(err)
	}
	c := full.Hardware
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Backend != BackendReal || c.SysfsRoot != "/host/sys" || c.Tools.NVMe != "nvme" || c.ToolTimeout == 0 {
		t.Errorf("defaults: %+v", c)
	}
	d, err := c.Declared(slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	want := Capabilities{
		"custom.rack": Ordered("r12"), "custom.gold": Bool(true),
		"nic.firmware.fw": Ordered("22.10"), // kept as written, not 22.1
		"nvme.sanitize":   Ordered("block", "crypto"),
	}
	if diff := cmp.Diff(want, d.For("0000:81:00.0")); diff != "" {
		t.Errorf("declared (-want +got):\n%s", diff)
	}
}

func TestConfigValidateListsEveryProblem(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	c := Config{
		Backend:          "virtual",
		GPUScrubTool:     "scrub",
		HostCapabilities: RawValues{"pci.reset": "yes", "no.such": true},
		DeviceCapabilities: map[string]RawValues{
			"not-an-address": {"custom.x": true},
			"0000:01:00.0":   {"nvme.sanitize": []any{"erase"}},
		},
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, part := range []string{`backend "virtual"`, "gpu_scrub_tool", "pci.reset", "not-an-address", `"erase" is not one of`} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error does not mention %q:\n%v", part, err)
		}
	}
	if strings.Contains(err.Error(), "no.such") {
		t.Errorf("unknown capability name made the config invalid: %v", err)
	}
	c = Config{HostCapabilities: RawValues{"no.such": true, "custom.ok": "1"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := c.Declared(slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Host["no.such"]; ok || len(d.Host) != 1 {
		t.Errorf("declared host capabilities %v", d.Host)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "capability=no.such") {
		t.Errorf("no warning for the unknown name; logs:\n%s", logs.String())
	}

	sim := Config{Backend: BackendSimulated, Simulator: SimConfig{Devices: []SimDevice{
		{Address: "0000:01:00.0"}, {Address: "01:00.0"}, {Address: "0000:02:00.0", Kind: "tpu", Faults: map[string]string{"sanitize": "explode"}},
	}}}
	err = sim.Validate()
	for _, part := range []string{"state_dir", "listed twice", `kind "tpu"`, "explode"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("simulator config error does not mention %q: %v", part, err)
		}
	}
}
