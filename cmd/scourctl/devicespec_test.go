package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The entries are what Nova's [pci] device_spec reads: one JSON object per
// device_spec line, address and ids as Nova matches them (ids without
// 0x, lower case), "one_time_use": true, and the static capability
// traits plus the operator's own as one comma-separated "traits" tag
// (Nova splits it at commas and keeps CUSTOM_ names as they are). Wear
// and health, which change, are left out.
func TestNovaDeviceSpecFormat(t *testing.T) {
	cfg := simHardware(t, "      - {address: '0000:81:00.0', kind: nvme, model: SIM, sanicap: 1, percent_used: 7}\n"+
		"      - {address: '0000:41:00.0', kind: gpu}\n")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"nova-device-spec", "--hardware-config", cfg, "--trait", "CUSTOM_RACK_A", "0000:81:00.0", "0000:41:00.0"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	var specs []string
	sawSection := false
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
		case line == "[pci]":
			sawSection = true
		case strings.HasPrefix(line, "device_spec = "):
			specs = append(specs, strings.TrimPrefix(line, "device_spec = "))
		default:
			t.Errorf("line neither comment, section nor device_spec: %q", line)
		}
	}
	want := []string{
		`{"address":"0000:81:00.0","vendor_id":"144d","product_id":"a80a","one_time_use":true,"traits":"CUSTOM_SCOUR_CAP_KIND_NVME,CUSTOM_SCOUR_CAP_NVME_FORMAT,CUSTOM_SCOUR_CAP_NVME_SANITIZE_CRYPTO,CUSTOM_SCOUR_CAP_PCI_IOMMU,CUSTOM_SCOUR_CAP_PCI_RESET,CUSTOM_RACK_A"}`,
		`{"address":"0000:41:00.0","vendor_id":"10de","product_id":"20b0","one_time_use":true,"traits":"CUSTOM_SCOUR_CAP_GPU_RESET,CUSTOM_SCOUR_CAP_GPU_SCRUB,CUSTOM_SCOUR_CAP_KIND_GPU,CUSTOM_SCOUR_CAP_PCI_IOMMU,CUSTOM_SCOUR_CAP_PCI_RESET,CUSTOM_RACK_A"}`,
	}
	if !sawSection {
		t.Error("no [pci] section line")
	}
	if diff := cmp.Diff(want, specs); diff != "" {
		t.Errorf("device_spec entries (-want +got):\n%s\n%s", diff, out.String())
	}
	for _, s := range specs {
		var v map[string]any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Errorf("entry is not JSON: %v: %s", err, s)
		}
		if strings.Contains(s, "PERCENT_USED") {
			t.Errorf("entry carries a wear trait, which goes stale: %s", s)
		}
	}

	code = run(context.Background(), []string{"nova-device-spec", "--hardware-config", cfg, "--trait", "A,B"}, &out, &errb)
	if code != 2 {
		t.Errorf("--trait with a comma: exit %d, want 2", code)
	}
}
