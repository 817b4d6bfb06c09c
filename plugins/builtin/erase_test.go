package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// TestEraseFallsBack: nvme-erase uses sanitize (by sanicap), else Format
// NVM (ses by fna), else an overwrite; it falls back only when a technique
// was refused before acting, and its result names what actually ran.
var errBoom = errors.New("boom")

func TestEraseFallsBack(t *testing.T) {
	unsup := fmt.Errorf("fake: %w", hardware.ErrUnsupported)
	tests := []struct {
		name              string
		sanicap, oacs     int
		fna               int
		sanErr, fmtErr    error
		fmtErrOnSecond    bool
		args              map[string]any
		wantTech, wantExp string
		wantCode          int
		wantCalls         []string // prefixes, in order
	}{
		{name: "sanitize crypto", sanicap: 0b111, oacs: 2, wantTech: "sanitize-crypto", wantExp: plugins.ExpectNone, wantCalls: []string{"Sanitize " + string(addr) + " crypto"}},
		{name: "sanitize block without crypto", sanicap: 0b111, oacs: 2, args: map[string]any{"crypto": false}, wantTech: "sanitize-block", wantExp: "0x00", wantCalls: []string{"Sanitize " + string(addr) + " block"}},
		{name: "qemu: sanicap 0 -> format ses 1", sanicap: 0, oacs: 0x10a, wantTech: "format-ses1", wantExp: "0x00", wantCalls: []string{"Format " + string(addr) + " /dev/nvme0n1 ses=1", "Format " + string(addr) + " /dev/nvme0n2 ses=1"}},
		{name: "sanicap 0, fna crypto -> format ses 2", sanicap: 0, oacs: 2, fna: 4, wantTech: "format-ses2", wantExp: plugins.ExpectNone},
		{name: "sanitize refused before acting -> format", sanicap: 0b010, oacs: 2, sanErr: unsup, wantTech: "format-ses1", wantExp: "0x00"},
		{name: "no sanitize, no format -> overwrite", sanicap: 0, oacs: 0, wantTech: "overwrite", wantExp: "0x00"},
		{name: "format refused -> overwrite", oacs: 2, fmtErr: unsup, wantTech: "overwrite", wantExp: "0x00"},
		{name: "sanitize failed mid-way: no fallback", sanicap: 0b010, oacs: 2, sanErr: errBoom, wantCode: plugins.CodeTryAgainLater},
		{name: "format of 2nd namespace refused: no fallback", oacs: 2, fmtErr: unsup, fmtErrOnSecond: true, wantCode: plugins.CodeUnsupported},
		{name: "overwrite not allowed", args: map[string]any{"allow_overwrite": false}, wantCode: plugins.CodeUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mediaFile(t, 1<<20)
			formats := 0
			be := &fakehw.Backend{
				SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
					return tc.sanErr
				},
				FormatF: func(context.Context, hardware.Address, string, int) error {
					formats++
					if tc.fmtErr != nil && (!tc.fmtErrOnSecond || formats == 2) {
						return tc.fmtErr
					}
					return nil
				},
				MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return []hardware.Media{m}, nil },
			}
			dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme",
				NVMe: &hardware.NVMeInfo{Controller: "nvme0", Namespaces: []string{"/dev/nvme0n1", "/dev/nvme0n2"}, SANICAP: tc.sanicap, OACS: tc.oacs, FNA: tc.fna}}
			res, err := run(t, "nvme-erase", be, dev, tc.args)
			if tc.wantCode != 0 {
				if plugins.CodeOf(err) != tc.wantCode || res != nil {
					t.Fatalf("got %v, %v; want code %d and no result", res, err, tc.wantCode)
				}
				if tc.name == "overwrite not allowed" && !strings.Contains(err.Error(), "nothing was erased") {
					t.Fatalf("error %q does not say nothing was erased", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			e, ok := ErasureOf(res.Details)
			if !ok || e.ID != tc.wantTech || e.Expect != tc.wantExp || e.Technique == "" {
				t.Fatalf("erasure %+v from %v; want %s expecting %s", e, res.Details, tc.wantTech, tc.wantExp)
			}
			// Media is listed to overwrite, and to sample blocks before a
			// crypto erase: the order check ignores it.
			calls := slices.DeleteFunc(be.Calls(), func(c string) bool { return strings.HasPrefix(c, "Discover") || strings.HasPrefix(c, "Media") })
			for i, want := range tc.wantCalls {
				if i >= len(calls) || !strings.HasPrefix(calls[i], want) {
					t.Fatalf("calls %q, want %q", calls, tc.wantCalls)
				}
			}
			if b, _ := os.ReadFile(m.Path); (tc.wantTech == "overwrite") != (len(bytes.Trim(b, "\x00")) == 0) {
				t.Fatalf("technique %s, media zeroed: %v", tc.wantTech, len(bytes.Trim(b, "\x00")) == 0)
			}
			if (e.Expect == plugins.ExpectNone) != (len(e.Samples) == 16) {
				t.Fatalf("%s: %d blocks sampled before the erase", tc.wantTech, len(e.Samples))
			}
		})
	}
}

// TestVerifySemanticsPerTechnique: verify compares with what the run's
// erase leaves, says it is not applicable after a crypto erase, and
// reports a structured verification either way.
func TestVerifySemanticsPerTechnique(t *testing.T) {
	m := mediaFile(t, 1<<20) // random bytes: what a crypto erase leaves
	be := &fakehw.Backend{MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return []hardware.Media{m}, nil }}
	spec, _ := Lookup("verify")
	target := func(e *Erasure, args map[string]any) *Target {
		return &Target{Device: &hardware.Device{Address: addr, Kind: hardware.KindNVMe}, Args: args, Erased: e}
	}
	verification := func(d map[string]any) map[string]any { v, _ := d[plugins.VerificationKey].(map[string]any); return v }
	crypto := &Erasure{ID: "sanitize-crypto", Expect: plugins.ExpectNone, Technique: "NVMe Sanitize, Crypto Erase"}
	if why, d := SkipVerify(nil, crypto); why == "" || d == nil {
		t.Fatal("verify after a crypto erase is not skipped")
	}
	res, err := spec.Run(context.Background(), be, target(crypto, nil))
	if err != nil {
		t.Fatalf("verify after crypto erase: %v", err)
	}
	if v := verification(res.Details); v["result"] != plugins.VerifyNotApplicable || v["bytes_read"] != int64(0) || v["reason"] == nil {
		t.Fatalf("verification %v", v)
	}
	// After a zeroing technique the random media fails, with details.
	_, err = spec.Run(context.Background(), be, target(&Erasure{ID: "format-ses1", Expect: "0x00"}, nil))
	pe := plugins.AsError(err)
	if v := verification(pe.Details); pe.Code != plugins.CodePermanent || v["result"] != plugins.VerifyFailed || !strings.Contains(fmt.Sprint(v["expected"]), "0x00") {
		t.Fatalf("verify of non-zero media after format: %v, %v", err, v)
	}
	// Overwritten with 0xa5: verify expects 0xa5 without being told.
	res, err = run(t, "overwrite", be, nil, map[string]any{"pattern": "0xa5"})
	if err != nil {
		t.Fatal(err)
	}
	e, ok := ErasureOf(res.Details)
	if !ok || e.Expect != "0xa5" {
		t.Fatalf("overwrite reports erasure %+v", e)
	}
	res, err = spec.Run(context.Background(), be, target(e, map[string]any{"mode": "all", "block_size": 65536}))
	if err != nil {
		t.Fatal(err)
	}
	if v := verification(res.Details); v["result"] != plugins.VerifyPassed || !strings.Contains(fmt.Sprint(v["expected"]), "0xa5") || v["bytes_read"] != int64(1<<20) {
		t.Fatalf("verification %v", v)
	}
}

// TestVerifyAfterCryptoErase: blocks sampled before a crypto erase must
// all have changed after it; a "crypto erase" that left the data fails
// verify, and uniform samples prove nothing (not applicable).
func TestVerifyAfterCryptoErase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		erase   func(path string) // what the fake sanitize does to the media
		uniform bool
		want    string
	}{
		{"noise", func(p string) { os.WriteFile(p, bytes.Repeat([]byte{0x5a, 0xa5}, 1<<19), 0o600) }, false, plugins.VerifyPassed},
		{"nothing erased", func(string) {}, false, plugins.VerifyFailed},
		{"unwritten media", func(p string) { os.WriteFile(p, bytes.Repeat([]byte{0x77}, 1<<20), 0o600) }, true, plugins.VerifyNotApplicable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mediaFile(t, 1<<20)
			if tc.uniform {
				os.WriteFile(m.Path, make([]byte, 1<<20), 0o600)
			}
			be := &fakehw.Backend{
				MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return []hardware.Media{m}, nil },
				SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
					tc.erase(m.Path)
					return nil
				},
			}
			dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme", NVMe: &hardware.NVMeInfo{Controller: "nvme0", SANICAP: 1}}
			res, err := run(t, "nvme-sanitize", be, dev, nil)
			if err != nil {
				t.Fatal(err)
			}
			e, _ := ErasureOf(res.Details)
			if why, _ := SkipVerify(nil, e); why != "" {
				t.Fatalf("verify skipped after a sampled crypto erase: %s", why)
			}
			spec, _ := Lookup("verify")
			vres, err := spec.Run(context.Background(), be, &Target{Device: dev, Erased: e})
			d := map[string]any{}
			if err != nil {
				d = plugins.AsError(err).Details
			} else {
				d = vres.Details
			}
			v, _ := d[plugins.VerificationKey].(map[string]any)
			if v["result"] != tc.want || (tc.want == plugins.VerifyFailed) != (plugins.CodeOf(err) == plugins.CodePermanent) {
				t.Fatalf("verification %v, err %v; want %s", v, err, tc.want)
			}
		})
	}
}

// TestUnknownControllerFactsAreNotFalse: when discovery could not read
// id-ctrl (nvme-cli missing, failing or timing out), oacs, fna and sanicap
// are unknown and the capabilities absent, not false. The erasing steps
// then try again later naming the discovery failure and what to check;
// they never fall back to a weaker technique (nvme-erase's full host
// overwrite) nor quarantine the device as "not supported".
func TestUnknownControllerFactsAreNotFalse(t *testing.T) {
	const why = "nvme id-ctrl timed out: context deadline exceeded"
	for _, step := range []string{"nvme-erase", "nvme-sanitize", "nvme-format"} {
		t.Run(step, func(t *testing.T) {
			m := mediaFile(t, 1<<20)
			before, _ := os.ReadFile(m.Path)
			be := &fakehw.Backend{
				SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
					return nil
				},
				FormatF: func(context.Context, hardware.Address, string, int) error { return nil },
				MediaF:  func(context.Context, hardware.Address) ([]hardware.Media, error) { return []hardware.Media{m}, nil },
			}
			// As hardware.Real discovers a controller whose id-ctrl failed.
			dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme",
				NVMe:   &hardware.NVMeInfo{Controller: "nvme0", Namespaces: []string{m.Path}},
				Absent: map[string]string{"nvme.format": why, "nvme.crypto_format": why, "nvme.sanitize": why}}
			dev.Capabilities = hardware.DeriveCapabilities(dev)
			res, err := run(t, step, be, dev, nil)
			if plugins.CodeOf(err) != plugins.CodeTryAgainLater || res != nil {
				t.Fatalf("%s with unknown controller facts: %v, %v; want try again later", step, res, err)
			}
			for _, want := range []string{string(addr), why, "hardware.tools.nvme", "hardware.tool_timeout", "unknown"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if calls := slices.DeleteFunc(be.Calls(), func(c string) bool { return strings.HasPrefix(c, "Media") }); len(calls) > 0 {
				t.Errorf("acted on the device: %q", calls)
			}
			if after, _ := os.ReadFile(m.Path); !bytes.Equal(before, after) {
				t.Error("media overwritten although the controller's erase support is unknown")
			}
			if e, ok := PredictErasure(step, nil, dev); ok {
				t.Errorf("dry run predicts %+v from unknown facts", e)
			}
		})
	}
}

// TestEraseOverwriteFallbackTakesAHostSlot: nvme-erase is in-device (no
// host-bound slot) but its overwrite fallback streams the drive through
// the host: it holds a slot (Target.HostSlot) for exactly that, and only
// that; sanitize and format take none.
func TestEraseOverwriteFallbackTakesAHostSlot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sanicap   int
		oacs      int
		wantSlots int
	}{{"sanitize", 0b010, 2, 0}, {"format", 0, 2, 0}, {"overwrite", 0, 0, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			m := mediaFile(t, 1<<20)
			var held, taken int
			overwroteHolding := false
			be := &fakehw.Backend{
				SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
					return nil
				},
				FormatF: func(context.Context, hardware.Address, string, int) error { return nil },
				MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) {
					overwroteHolding = held == 1
					return []hardware.Media{m}, nil
				},
			}
			dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme",
				NVMe: &hardware.NVMeInfo{Controller: "nvme0", Namespaces: []string{"/dev/nvme0n1"}, SANICAP: tc.sanicap, OACS: tc.oacs}}
			spec, _ := Lookup("nvme-erase")
			target := &Target{Device: dev, Step: "erase", Args: map[string]any{"crypto": false},
				HostSlot: func(context.Context) (func(), error) { held++; taken++; return func() { held-- }, nil }}
			if _, err := spec.Run(context.Background(), be, target); err != nil {
				t.Fatal(err)
			}
			if taken != tc.wantSlots || held != 0 {
				t.Fatalf("took %d host-bound slots (%d still held), want %d", taken, held, tc.wantSlots)
			}
			if tc.wantSlots == 1 && !overwroteHolding {
				t.Fatal("overwrote without holding the host-bound slot")
			}
			// A slot refused (Placement showed the device taken meanwhile):
			// nothing written.
			m = mediaFile(t, 1<<20)
			before, _ := os.ReadFile(m.Path)
			target.HostSlot = func(context.Context) (func(), error) { return nil, errBoom }
			_, err := spec.Run(context.Background(), be, target)
			after, _ := os.ReadFile(m.Path)
			if (tc.wantSlots == 1) != errors.Is(err, errBoom) || tc.wantSlots == 1 && !bytes.Equal(before, after) {
				t.Fatalf("slot refused: err %v, media changed %v", err, !bytes.Equal(before, after))
			}
		})
	}
}

// TestEraseStepsOnVFIONeedDriverNVMe: a passthrough NVMe on vfio-pci that
// discovery has never seen on nvme (no memo) has no controller to ask;
// an erasing step without `driver: nvme` is a configuration problem, not
// a passing failure: invalid config naming the fix, nothing done.
func TestEraseStepsOnVFIONeedDriverNVMe(t *testing.T) {
	const why = `bound to "vfio-pci", not nvme: no controller or block device; bind to nvme to discover`
	for _, step := range []string{"nvme-erase", "nvme-sanitize", "nvme-format"} {
		t.Run(step, func(t *testing.T) {
			be := &fakehw.Backend{}
			dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "vfio-pci",
				NVMe:   &hardware.NVMeInfo{BoundToVFIO: true},
				Absent: map[string]string{"nvme.format": why, "nvme.crypto_format": why, "nvme.sanitize": why}}
			dev.Capabilities = hardware.DeriveCapabilities(dev)
			res, err := run(t, step, be, dev, nil)
			if plugins.CodeOf(err) != plugins.CodeInvalidConfig || res != nil {
				t.Fatalf("%s on vfio-pci: %v, %v; want invalid config", step, res, err)
			}
			if !strings.Contains(err.Error(), "driver: nvme") || !strings.Contains(err.Error(), `"vfio-pci"`) {
				t.Errorf("error %q does not name the fix", err)
			}
			if calls := slices.DeleteFunc(be.Calls(), func(c string) bool { return strings.HasPrefix(c, "Media") }); len(calls) > 0 {
				t.Errorf("acted on the device: %q", calls)
			}
		})
	}
}
