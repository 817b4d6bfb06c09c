package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
)

// The whole engine against the file-backed simulator.
func TestPipelineOnSimulator(t *testing.T) {
	s, err := sim.New(hardware.Config{Backend: hardware.BackendSimulated, Simulator: hardware.SimConfig{
		StateDir: t.TempDir(), Step: time.Millisecond, Devices: []hardware.SimDevice{
			{Address: "0000:81:00.0", Kind: hardware.KindNVMe, MediaBytes: 2 << 20, SANICAP: 0b100, PercentUsed: 5},
			{Address: "0000:82:00.0", Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0b100, PercentUsed: 93},
			{Address: "0000:83:00.0", Kind: hardware.KindNVMe, MediaBytes: 1 << 20, Driver: "vfio-pci"},
			{Address: "0000:84:00.0", Kind: hardware.KindNVMe, MediaBytes: 1 << 20, SANICAP: 0},
		}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig([]byte(`
profiles:
  - name: nvme-sanitize
    match: {kinds: [nvme], requires: {nvme.sanitize: ">=overwrite"}}
    pipeline:
      name: nvme
      steps:
        - {name: wear, type: nvme-wear-check}
        - {name: sanitize, type: nvme-sanitize, args: {poll: 10ms}}
        - {name: overwrite, type: overwrite, args: {block_size: 65536, queue_depth: 4}}
        - {name: verify, type: verify, args: {mode: all}}
  - name: nvme-any
    match: {vendor_product: ["144d:*"], kinds: [nvme], resource_classes: [CUSTOM_ANY]}
    pipeline:
      name: nvme-any
      steps:
        - {name: sanitize, type: nvme-sanitize, on_unsupported: skip}
        - {name: overwrite, type: overwrite}
        - {name: verify, type: verify}
  - name: nvme-format
    match: {kinds: [nvme]}
    pipeline:
      name: nvme-format
      steps:
        - {name: format, type: nvme-format, driver: nvme}
        - {name: reset, type: pci-reset}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, Options{Backend: s, Checkpoints: NewMemCheckpoints(), Registerer: prometheus.NewRegistry(),
		Logger:      slog.New(slog.DiscardHandler),
		Allocations: AllocationCheckerFunc(func(context.Context, string) (bool, error) { return false, nil })})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	read := func(addr hardware.Address) []byte {
		d, err := s.Discover(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		if d.Driver == "vfio-pci" { // the test looks; media show only on nvme
			s.BindDriver(ctx, addr, "nvme")
			defer s.BindDriver(ctx, addr, "vfio-pci")
		}
		ms, err := s.Media(ctx, addr)
		if err != nil || len(ms) == 0 {
			t.Fatalf("media %v %v", ms, err)
		}
		b, _ := os.ReadFile(ms[0].Path)
		return b
	}
	tests := []struct {
		addr      hardware.Address
		rc        string
		verdict   Verdict
		profile   string
		wantZeros bool
	}{
		{"0000:81:00.0", "", VerdictClean, "nvme-sanitize", true},
		{"0000:82:00.0", "", VerdictQuarantine, "nvme-sanitize", true}, // worn: wiped (strongest sanitize), then retired
		{"0000:83:00.0", "", VerdictClean, "nvme-format", true},        // bound to nvme for the format, then back
		{"0000:84:00.0", "CUSTOM_ANY", VerdictClean, "nvme-any", true}, // no sanitize support: skipped, overwritten
	}
	for _, tc := range tests {
		res, err := e.Clean(ctx, Target{Address: tc.addr, RPUUID: "rp-" + string(tc.addr), ResourceClass: tc.rc})
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := s.Discover(ctx, tc.addr); tc.addr == "0000:83:00.0" && d.Driver != "vfio-pci" {
			t.Errorf("%s left on driver %q, want vfio-pci restored", tc.addr, d.Driver)
		}
		if res.Verdict != tc.verdict || res.Profile != tc.profile {
			t.Errorf("%s: %s", tc.addr, res)
			continue
		}
		if tc.addr == "0000:84:00.0" && states(res.Steps) != "sanitize=skipped overwrite=succeeded verify=succeeded" {
			t.Errorf("%s: steps %s", tc.addr, states(res.Steps))
		}
		if tc.addr == "0000:82:00.0" {
			// The wear gate said retire; nothing of the pipeline ran after
			// it, but the retirement wipe erased the drive first.
			if res.Step != "wear" || states(res.Steps) != "wear=failed retire-wipe=succeeded retire-readback=succeeded" {
				t.Errorf("%s: step %q, steps %s; want the wear gate's verdict after wear=failed retire-wipe=succeeded retire-readback=succeeded", tc.addr, res.Step, states(res.Steps))
			}
			if rt := res.Retirement; rt == nil || !rt.Wiped || rt.Technique != "NVMe Sanitize, Overwrite" {
				t.Errorf("%s: retirement %+v; want wiped by NVMe Sanitize, Overwrite", tc.addr, rt)
			}
			if !strings.Contains(res.Reason, "wiped before retirement") {
				t.Errorf("%s: reason %q does not say the drive was wiped before retirement", tc.addr, res.Reason)
			}
		}
		b := read(tc.addr)
		if zero := len(bytes.Trim(b, "\x00")) == 0; zero != tc.wantZeros {
			t.Errorf("%s: media all zeros = %v, want %v", tc.addr, zero, tc.wantZeros)
		}
		if tc.wantZeros && bytes.Contains(b, []byte(sim.TenantPattern)) {
			t.Errorf("%s: the tenant's data is still on the media", tc.addr)
		}
	}
}
