package hardware

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "tools", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseIDCtrl(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want IDCtrl
	}{
		{"id-ctrl-samsung-pm9a3.json", IDCtrl{VID: 5197, SSVID: 5197, SN: "S64GNE0R600123", MN: "SAMSUNG MZQL23T8HCLS-00A07", FR: "GDC5602Q", OACS: 95, FNA: 4, SANICAP: 1610612739}},
		{"id-ctrl-kioxia-cm6.json", IDCtrl{VID: 7695, SSVID: 7695, SN: "71D0A03FT1JE", MN: "KIOXIA KCM6XRUL3T84", FR: "0106", OACS: 94, FNA: 0, SANICAP: 6}},
		{"id-ctrl-solidigm-p5510.json", IDCtrl{VID: 32902, SSVID: 32902, SN: "PHAB123400AB3P8CGN", MN: "INTEL SSDPF2KX038TZ", FR: "JCV10200", OACS: 14, FNA: 4, SANICAP: 1610612739}},
		{"id-ctrl-consumer-nosanitize.json", IDCtrl{VID: 5197, SSVID: 5197, SN: "S4EWNX0R123456", MN: "Samsung SSD 970 EVO Plus 1TB", FR: "2B2QEXM7", OACS: 23, FNA: 0, SANICAP: 0}},
	} {
		got, err := ParseIDCtrl(fixture(t, tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if diff := cmp.Diff(tc.want, *got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.file, diff)
		}
	}
	if _, err := ParseIDCtrl([]byte("not json")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestSanitizeMethods(t *testing.T) {
	t.Parallel()
	for sanicap, want := range map[int][]string{
		0: nil, 1: {"crypto"}, 6: {"overwrite", "block"}, 1610612739: {"block", "crypto"}, 7: {"overwrite", "block", "crypto"},
	} {
		if diff := cmp.Diff(want, SanitizeMethods(sanicap)); diff != "" {
			t.Errorf("SanitizeMethods(%#x) (-want +got):\n%s", sanicap, diff)
		}
	}
}

func TestParseSmartLog(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]SmartLog{
		"smart-log-samsung-pm9a3.json":   {CriticalWarning: 0, PercentUsed: 3, AvailSpare: 100, SpareThresh: 10},
		"smart-log-kioxia-cm6-worn.json": {CriticalWarning: 5, PercentUsed: 104, AvailSpare: 8, SpareThresh: 10},
		"smart-log-newer-nvme-cli.json":  {CriticalWarning: 1, PercentUsed: 42, AvailSpare: 5, SpareThresh: 10},
	} {
		got, err := ParseSmartLog(fixture(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", file, diff)
		}
	}
	if _, err := ParseSmartLog([]byte(`{"temperature": 300}`)); err == nil {
		t.Error("smart log without wear fields parsed")
	}
}

func TestParseSanitizeLog(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]SanitizeLog{
		"sanitize-log-never.json":           {SPROG: 65535, Status: SanitizeNever},
		"sanitize-log-progress.json":        {SPROG: 32768, Status: SanitizeInProgress},
		"sanitize-log-progress-block.json":  {SPROG: 16384, Status: SanitizeInProgress, CDW10: 2},
		"sanitize-log-progress-crypto.json": {SPROG: 16384, Status: SanitizeInProgress, CDW10: 4},
		"sanitize-log-done.json":            {SPROG: 65535, Status: SanitizeDone},
		"sanitize-log-failed.json":          {SPROG: 65535, Status: SanitizeFailed},
	} {
		got, err := ParseSanitizeLog(fixture(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", file, diff)
		}
	}
	// Older nvme-cli prints the raw SSTAT word: status is its low 3 bits.
	got, err := ParseSanitizeLog([]byte(`{"nvme3":{"sprog":100,"sstat":258}}`))
	if err != nil || *got != (SanitizeLog{SPROG: 100, Status: SanitizeInProgress}) {
		t.Errorf("raw sstat: %+v, %v", got, err)
	}
	for _, bad := range []string{`{}`, `{"a":{"sprog":1,"sstat":{"status":"weird"}}}`, `{"a":{"sstat":1}}`} {
		if _, err := ParseSanitizeLog([]byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestParseNVMeList(t *testing.T) {
	t.Parallel()
	got, err := ParseNVMeList(fixture(t, "nvme-list-v.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := []NVMeListController{
		{Controller: "nvme0", Address: "0000:01:00.0", Model: "SAMSUNG MZQL23T8HCLS-00A07", Serial: "S64GNE0R600123", Firmware: "GDC5602Q", Namespaces: []string{"nvme0n1"}},
		{Controller: "nvme1", Address: "0000:81:00.0", Model: "KIOXIA KCM6XRUL3T84", Serial: "71D0A03FT1JE", Firmware: "0106", Namespaces: []string{"nvme1n1", "nvme1n2"}},
		{Controller: "nvme2", Model: "Linux", Serial: "fabrics-remote", Firmware: "6.1.0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestParseNVMeListTwoControllers: nvme-cli lists a multipath head at
// the subsystem level, beside every controller of the subsystem. Only the
// controller whose own path node stands for it gets it: the other one
// (a VF next to its PF, the second port of a dual-port drive) does not
// own that namespace, and formatting it would destroy data not ours.
func TestParseNVMeListTwoControllers(t *testing.T) {
	t.Parallel()
	got, err := ParseNVMeList(fixture(t, "nvme-list-v-two-controllers.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := []NVMeListController{
		{Controller: "nvme0", Address: "0000:01:00.0", Model: "KIOXIA KCM6XRUL3T84", Serial: "71D0A03FT1JF", Firmware: "0106", Namespaces: []string{"nvme0n1"}},
		{Controller: "nvme1", Address: "0000:81:00.0", Model: "KIOXIA KCM6XRUL3T84", Serial: "71D0A03FT1JF", Firmware: "0106"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	t.Parallel()
	got, err := ParseNvidiaSMI(fixture(t, "nvidia-smi-a100.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := []NvidiaGPU{
		{Address: "0000:41:00.0", Name: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Driver: "535.129.03", ECC: "Enabled", Serial: "1323220012345", VBIOS: "92.00.45.00.03"},
		{Address: "0000:c1:00.0", Name: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, Driver: "535.129.03", ECC: "Disabled", Serial: "1323220012399", VBIOS: "92.00.45.00.03"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	g, err := ParseNvidiaSMI(fixture(t, "nvidia-smi-geforce.csv"))
	if err != nil || len(g) != 1 || g[0].ECC != "[N/A]" || g[0].MemoryMiB != 24576 {
		t.Errorf("geforce: %+v, %v", g, err)
	}
	if _, err := ParseNvidiaSMI([]byte("00000000:41:00.0, A100, lots, 1, Enabled, x, y\n")); err == nil {
		t.Error("non-numeric memory parsed")
	}
}

func TestParseDevlinkInfo(t *testing.T) {
	t.Parallel()
	got, err := ParseDevlinkInfo(fixture(t, "devlink-info-cx6dx.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := []DevlinkInfo{{
		Handle: "pci/0000:3b:00.0", Driver: "mlx5_core", Serial: "MT2048X12345",
		Fixed:   map[string]string{"fw.psid": "MT_0000000436"},
		Running: map[string]string{"fw.version": "22.31.1014", "fw": "22.31.1014"},
		Stored:  map[string]string{"fw.version": "22.31.1014", "fw": "22.31.1014"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	e810, err := ParseDevlinkInfo(fixture(t, "devlink-info-e810.json"))
	if err != nil || len(e810) != 1 || e810[0].Running["fw.mgmt"] != "7.3.4" || e810[0].Fixed["board.id"] != "K91258-000" {
		t.Errorf("e810: %+v, %v", e810, err)
	}
}
