package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDevicesFakeSysfs(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"devices", "--sysfs", "../../hardware/testdata/sys"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	text := out.String()
	for _, want := range []string{
		"0000:01:00.0  nvme  0x144d:0xa80a  driver=nvme",
		"0000:02:00.0  nvme  0x8086:0x0b60  driver=vfio-pci",
		"0000:41:00.0  gpu", "0000:3b:00.0  nic",
		`absent: bound to "vfio-pci"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "0000:00:1f.4") {
		t.Errorf("generic device listed without -all:\n%s", text)
	}
}

func TestDevicesSimulatorJSON(t *testing.T) {
	cfg := simHardware(t, "      - {address: '0000:81:00.0', kind: nvme, model: SIM, sanicap: 1}\n"+
		"  device_capabilities:\n    '0000:81:00.0': {custom.tier: gold}\n")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"devices", "--hardware-config", cfg, "-o", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	var reports []struct {
		Address      string
		Capabilities map[string]string
	}
	if err := json.Unmarshal(out.Bytes(), &reports); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(reports) != 1 || reports[0].Capabilities["nvme.sanitize"] != "[crypto]" || reports[0].Capabilities["custom.tier"] != "[gold]" {
		t.Errorf("reports %+v", reports)
	}
	if code := run(context.Background(), []string{"devices", "--hardware-config", cfg, "zz"}, &out, &errb); code != 1 {
		t.Errorf("bad address exit %d", code)
	}
}

// simHardware writes a hardware section for the simulator with the
// devices (YAML list items under simulator.devices, and whatever follows
// at the section's level) and returns its path.
func simHardware(t *testing.T, devices string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hw.yaml")
	body := "hardware:\n  backend: simulated\n  simulator:\n    state_dir: " + filepath.Join(dir, "state") + "\n    devices:\n" + devices
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}
