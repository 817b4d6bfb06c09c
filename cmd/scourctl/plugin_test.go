package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePCI points plugin test at a sysfs whose bus/pci/devices lists addrs
// (none: an empty one, a host with no device at the tests' addresses).
func fakePCI(t *testing.T, addrs ...string) {
	t.Helper()
	root := t.TempDir()
	for _, a := range append([]string{""}, addrs...) {
		if err := os.MkdirAll(filepath.Join(root, "bus", "pci", "devices", a), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := pluginTestSysfs
	pluginTestSysfs = root
	t.Cleanup(func() { pluginTestSysfs = old })
}

func TestPluginTestCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plugins must be root-owned: run as root")
	}
	fakePCI(t)
	sh, err := os.ReadFile("../../plugins/examples/shell/zero-media")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "zero-media")
	os.WriteFile(good, sh, 0o755)
	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte("#!/bin/sh\ncase $SCOUR_COMMAND in VERSION) echo '{\"supported_versions\":[\"1.0\"]}';; CHECK) echo '{\"status\":\"ok\"}';; *) echo 'wiping...'; exit 1;; esac\n"), 0o755)
	untold := filepath.Join(dir, "untold") // erases (it could), reports no technique
	os.WriteFile(untold, []byte("#!/bin/sh\ncase $SCOUR_COMMAND in VERSION) echo '{\"supported_versions\":[\"1.0\"]}'; exit 0;; esac\ncat >/dev/null\n"+
		"case $SCOUR_COMMAND in CHECK) echo '{\"status\":\"ok\"}';; *) echo '{\"status\":\"ok\",\"details\":{\"bytes\":1}}';; esac\n"), 0o755)
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, sh, 0o755)
	os.Chmod(loose, 0o775)

	simCfg := filepath.Join(dir, "sim.yaml")
	os.WriteFile(simCfg, []byte("hardware:\n  backend: simulated\n  simulator:\n    state_dir: "+filepath.Join(t.TempDir(), "sim")+
		"\n    devices: [{address: \"0000:81:00.0\", kind: nvme, namespaces: 2}]\n"), 0o644)

	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"plugin", "test", good, "--device", "0000:81:00.0", "--media", "2"}, 0, []string{
			"PASS  VERSION: speaks protocol 1.0", "PASS  CHECK: ok", "PASS  CLEAN: ok", `PASS  CLEAN: reports details.technique "overwrite, 1 pass of 0x00 (dd, fsync)"`,
			"is all zeros after CLEAN", "0 failed", "0 warnings"}},
		// Second review, M3: a clear or purge pipeline's run does not count
		// an erase that reports no technique; plugin test says so.
		{[]string{"plugin", "test", untold, "--device", "0000:81:00.0"}, 0, []string{"WARN  CLEAN reports no details.technique", "destructive: false", "0 failed"}},
		{[]string{"plugin", "test", "--device", "81:00.0", good, "--media", "0"}, 0, []string{"CHECK: answers unsupported (code 2)", "0 failed"}},
		{[]string{"plugin", "test", broken, "--device", "0000:81:00.0"}, 1, []string{"FAIL  CLEAN", "exited with status 1 and printed no valid JSON"}},
		{[]string{"plugin", "test", loose, "--device", "0000:81:00.0"}, 1, []string{"FAIL  permissions", "writable by group or others"}},
		{[]string{"plugin", "test", good}, 2, nil},
		{[]string{"plugin", "test", good, "--device", "0000:81:00.0", "--sim-config", simCfg}, 0, []string{
			"driver nvme), 2 media", "PASS  CLEAN: ok", "nvme0n2.img is all zeros after CLEAN", "0 failed"}},
	}
	for _, tc := range tests {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", tc.args, code, tc.code, out.String(), errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out.String())
			}
		}
	}
}

// plugin test hands the plugin --device as SCOUR_PCI_ADDRESS, and a plugin
// that works by address (fpga-xrt: xbmgmt program --device $bdf) acts on
// whatever device is there. So while this host's sysfs lists a PCI device
// at --device, or cannot be read, it refuses before the plugin runs at all
// (VERSION included), with or without --sim-config; at a free address the
// same plugin runs.
func TestPluginTestRefusesARealDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("plugins must be root-owned: run as root")
	}
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	plugin := filepath.Join(dir, "by-address")
	// Records every command it gets, with the address, then answers as
	// a plugin that acts on the device by its address would.
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho \"$SCOUR_COMMAND ${SCOUR_PCI_ADDRESS:-}\" >>"+ran+"\n"+
		"case $SCOUR_COMMAND in VERSION) echo '{\"supported_versions\":[\"1.0\"]}'; exit 0;; esac\ncat >/dev/null\n"+
		"echo '{\"status\":\"ok\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	simCfg := filepath.Join(dir, "sim.yaml")
	os.WriteFile(simCfg, []byte("hardware:\n  backend: simulated\n  simulator:\n    state_dir: "+filepath.Join(t.TempDir(), "sim")+
		"\n    devices: [{address: \"0000:41:00.0\", kind: nvme, namespaces: 1}]\n"), 0o644)
	for _, tc := range []struct {
		name  string
		pci   []string // devices the host's sysfs lists; nil: no sysfs at all
		args  []string
		code  int
		runs  bool
		wants []string
	}{
		{"device at the address", []string{"0000:41:00.0"}, []string{"--device", "0000:41:00.0"}, 1, false,
			[]string{"FAIL  --device 0000:41:00.0: this host's hardware discovery finds a PCI device there", "never hands a plugin the address of a device of this host"}},
		{"short form of the address", []string{"0000:41:00.0"}, []string{"--device", "41:00.0"}, 1, false,
			[]string{"finds a PCI device there"}},
		{"simulator at a real device's address", []string{"0000:41:00.0"}, []string{"--device", "0000:41:00.0", "--sim-config", simCfg}, 1, false,
			[]string{"finds a PCI device there", "in --sim-config too"}},
		{"sysfs unreadable", nil, []string{"--device", "0000:41:00.0"}, 1, false,
			[]string{"cannot tell whether a PCI device of this host is at that address"}},
		{"free address", []string{"0000:00:01.0"}, []string{"--device", "0000:41:00.0"}, 0, true, []string{"PASS  CLEAN: ok", "0 failed"}},
		{"simulator at a free address", []string{"0000:00:01.0"}, []string{"--device", "0000:41:00.0", "--sim-config", simCfg}, 0, true,
			[]string{"PASS  CLEAN: ok", "0 failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(ran)
			if tc.pci == nil {
				old := pluginTestSysfs
				pluginTestSysfs = filepath.Join(t.TempDir(), "no-sysfs")
				t.Cleanup(func() { pluginTestSysfs = old })
			} else {
				fakePCI(t, tc.pci...)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"plugin", "test", plugin}, tc.args...), &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errb.String())
			}
			for _, w := range tc.wants {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			log, err := os.ReadFile(ran)
			switch {
			case !tc.runs && err == nil:
				t.Errorf("the plugin ran although a device may be at the address:\n%s", log)
			case !tc.runs && !os.IsNotExist(err):
				t.Fatal(err)
			case tc.runs && !strings.Contains(string(log), "CLEAN 0000:41:00.0"):
				t.Errorf("at a free address the plugin did not CLEAN 0000:41:00.0: %q, %v", log, err)
			}
		})
	}
}
