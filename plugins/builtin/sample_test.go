package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/pipeline/fakehw"
	"github.com/scour-project/scour/plugins"
)

// TestVerifyFollowsTheNamespaceNotItsName: the blocks sampled before a
// crypto erase are read back from where the Backend says the device's
// namespace is at verify time, not from its kernel name at sampling time:
// between the steps the controller may have been re-bound (nvme1n1 is now
// nvme3n1) and the old name may be another drive's. A sample that matches
// no namespace of this device fails the verification.
func TestVerifyFollowsTheNamespaceNotItsName(t *testing.T) {
	noise := func(p string) { os.WriteFile(p, bytes.Repeat([]byte{0x5a, 0xa5}, 1<<19), 0o600) }
	tests := []struct {
		name   string
		erase  func(path string)                           // what the fake sanitize does
		now    func(moved hardware.Media) []hardware.Media // the device's media at verify time
		serial string                                      // the controller's serial at verify time
		viaDB  bool                                        // samples went through a checkpoint store (JSON)
		legacy bool                                        // samples stored without their namespace index
		want   string
		says   string // in the mismatch
	}{
		{name: "renamed, erased", erase: noise, want: plugins.VerifyPassed},
		{name: "renamed, erased, via the store", erase: noise, viaDB: true, want: plugins.VerifyPassed},
		{name: "renamed, nothing erased", erase: func(string) {}, want: plugins.VerifyFailed, says: "unchanged"},
		{name: "renamed, nothing erased, via the store", erase: func(string) {}, viaDB: true, want: plugins.VerifyFailed, says: "unchanged"},
		{name: "namespace gone", erase: noise, now: func(hardware.Media) []hardware.Media { return nil }, want: plugins.VerifyFailed, says: "is gone"},
		{name: "namespace resized", erase: noise, now: func(m hardware.Media) []hardware.Media { m.Size /= 2; return []hardware.Media{m} },
			want: plugins.VerifyFailed, says: "bytes"},
		{name: "another controller in the slot", erase: noise, serial: "S2", want: plugins.VerifyFailed, says: `serial "S2"`},
		{name: "stored without index, name no longer this device's", erase: noise, viaDB: true, legacy: true, want: plugins.VerifyFailed, says: "not one of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mediaFile(t, 1<<20) // the namespace, "nvme1n1" when sampled
			media := []hardware.Media{m}
			be := &fakehw.Backend{
				MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return media, nil },
				SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
					tc.erase(m.Path)
					return nil
				},
			}
			dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme", Serial: "S1", NVMe: &hardware.NVMeInfo{Controller: "nvme1", SANICAP: 1}}
			res, err := run(t, "nvme-sanitize", be, dev, nil)
			if err != nil {
				t.Fatal(err)
			}
			details := res.Details
			if tc.viaDB {
				details = jsonRoundTrip(t, details, tc.legacy)
			}
			e, _ := ErasureOf(details)
			if len(e.Samples) == 0 {
				t.Fatal("no samples")
			}

			// Re-bound: the namespace is at a new name; the old name now
			// holds another drive, with other data.
			moved := hardware.Media{Path: m.Path + ".nvme3n1", Size: m.Size}
			if err := os.Rename(m.Path, moved.Path); err != nil {
				t.Fatal(err)
			}
			other := mediaFile(t, 1<<20)
			if err := os.Rename(other.Path, m.Path); err != nil {
				t.Fatal(err)
			}
			media = []hardware.Media{moved}
			if tc.now != nil {
				media = tc.now(moved)
			}
			now := *dev
			now.Serial = "S1"
			if tc.serial != "" {
				now.Serial = tc.serial
			}

			spec, _ := Lookup("verify")
			vres, err := spec.Run(context.Background(), be, &Target{Device: &now, Erased: e})
			var d map[string]any
			if err != nil {
				d = plugins.AsError(err).Details
			} else {
				d = vres.Details
			}
			v, _ := d[plugins.VerificationKey].(map[string]any)
			if v["result"] != tc.want {
				t.Fatalf("verification %v, err %v; want %s", v, err, tc.want)
			}
			if tc.want == plugins.VerifyFailed {
				if plugins.CodeOf(err) != plugins.CodePermanent || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), string(addr)) {
					t.Fatalf("error %v (code %d); want a permanent failure naming %s and saying %q", err, plugins.CodeOf(err), addr, tc.says)
				}
			}
		})
	}
}

// verifyTriesAgainLater runs verify after erasure e and wants it to fail
// as try-again-later with a failed verification, its message saying each
// of says (what: the case, for the failure message).
func verifyTriesAgainLater(t *testing.T, be hardware.Backend, dev *hardware.Device, e *Erasure, what string, says ...string) {
	t.Helper()
	spec, _ := Lookup("verify")
	res, err := spec.Run(context.Background(), be, &Target{Device: dev, Erased: e})
	if err == nil {
		t.Fatalf("verify with %s answered ok: %v", what, res.Details)
	}
	pe := plugins.AsError(err)
	v, _ := pe.Details[plugins.VerificationKey].(map[string]any)
	if pe.Code != plugins.CodeTryAgainLater || v["result"] != plugins.VerifyFailed {
		t.Fatalf("verify with %s: error %v (code %d), verification %v; want try-again-later, verification failed", what, err, pe.Code, v)
	}
	for _, w := range says {
		if !strings.Contains(pe.Msg, w) {
			t.Fatalf("verify with %s: %q does not say %q", what, pe.Msg, w)
		}
	}
}

// jsonRoundTrip is what a checkpoint store does to step details; legacy
// drops the namespace index, as samples stored before it was kept.
func jsonRoundTrip(t *testing.T, details map[string]any, legacy bool) map[string]any {
	t.Helper()
	b, err := json.Marshal(details)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if legacy {
		for _, s := range out[preEraseKey].([]any) {
			delete(s.(map[string]any), "media")
			delete(s.(map[string]any), "serial")
			delete(s.(map[string]any), "size")
		}
	}
	return out
}

// TestLostSamplesFailVerify: a crypto erase's record that says blocks
// were sampled but no longer holds them (the claims store drops details
// over its size limit; scourd restarted before the verify) fails the
// verify as try-again-later, with a verification that did not pass; only
// an erase that sampled nothing is "not applicable". An older scourd's
// record has no count: the store's truncated_keys naming the samples is
// the same evidence lost.
func TestLostSamplesFailVerify(t *testing.T) {
	tests := []struct {
		name  string
		store func(d map[string]any) // what the claims store kept
		lost  bool
	}{
		{name: "count kept, samples dropped", lost: true, store: func(d map[string]any) { delete(d, preEraseKey) }},
		{name: "older record, samples named dropped", lost: true, store: func(d map[string]any) {
			delete(d, preEraseKey)
			delete(d, plugins.SampledKey)
			d[truncatedKeysKey] = []any{"not_used", preEraseKey}
		}},
		{name: "nothing could be sampled", store: func(d map[string]any) {
			delete(d, preEraseKey)
			d[plugins.SampledKey] = float64(0)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mediaFile(t, 1<<20)
			be := &fakehw.Backend{
				MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return []hardware.Media{m}, nil },
				SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
					return nil
				},
			}
			dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme", Serial: "S1", NVMe: &hardware.NVMeInfo{Controller: "nvme1", SANICAP: 1}}
			res, err := run(t, "nvme-sanitize", be, dev, nil)
			if err != nil {
				t.Fatal(err)
			}
			details := jsonRoundTrip(t, res.Details, false)
			if n, _ := details[plugins.SampledKey].(float64); n != 16 {
				t.Fatalf("%s = %v, want 16 (one namespace's samples)", plugins.SampledKey, details[plugins.SampledKey])
			}
			tc.store(details)
			e, ok := ErasureOf(details)
			if !ok {
				t.Fatal("no erasure in the stored details")
			}
			why, _ := SkipVerify(nil, e)
			if !tc.lost {
				if why == "" {
					t.Fatal("an erase that sampled nothing: verify not skipped as not applicable")
				}
				return
			}
			if why != "" {
				t.Fatalf("lost samples skipped as not applicable: %s", why)
			}
			verifyTriesAgainLater(t, be, dev, e, "the samples lost", string(addr))
		})
	}
}

// TestUnreadableNamespaceFailsVerify: before a crypto erase, a namespace
// that cannot be read (a tenant may cause the I/O error) used to make
// sampleMedia drop every sample, the error discarded: verify was then
// skipped as "no blocks could be sampled". Now the readable namespaces
// keep their samples, the erase records why the other could not be
// sampled (also through a checkpoint store, and when the store dropped
// the key), and the verify after it fails as try-again-later with a
// failed verification naming the namespace, even when every sample it
// has changed. Media that cannot be listed are such an error too; a
// device without media (ErrUnsupported) is not. Found in review (M5).
func TestUnreadableNamespaceFailsVerify(t *testing.T) {
	ns1, ns3 := mediaFile(t, 1<<20), mediaFile(t, 1<<20)
	ns2 := hardware.Media{Path: t.TempDir(), Size: 1 << 20} // a directory: every read fails (EISDIR)
	be := &fakehw.Backend{
		MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) {
			return []hardware.Media{ns1, ns2, ns3}, nil
		},
		SanitizeF: func(context.Context, hardware.Address, hardware.SanitizeAction, time.Duration, hardware.Progress) error {
			for _, m := range []hardware.Media{ns1, ns3} {
				if err := os.WriteFile(m.Path, bytes.Repeat([]byte{0x5a, 0xa5}, 1<<19), 0o600); err != nil {
					return err
				}
			}
			return nil
		},
	}
	dev := &hardware.Device{Address: addr, Kind: hardware.KindNVMe, Driver: "nvme", Serial: "S1", NVMe: &hardware.NVMeInfo{Controller: "nvme1", SANICAP: 1}}

	samples, err := sampleMedia(context.Background(), be, dev)
	if err == nil || !strings.Contains(err.Error(), "namespace 2 of "+string(addr)) || !strings.Contains(err.Error(), ns2.Path) {
		t.Fatalf("sampling with namespace 2 unreadable: %v; want an error naming namespace 2 of %s and its path", err, addr)
	}
	if len(samples) != 2*sampleBlocks || samples[0].Media != 0 || samples[len(samples)-1].Media != 2 {
		t.Fatalf("sampled %d blocks; want %d, of namespaces 1 and 3", len(samples), 2*sampleBlocks)
	}

	res, err := run(t, "nvme-sanitize", be, dev, nil)
	if err != nil {
		t.Fatalf("the erase itself failed: %v; want it to run, its verify to fail", err)
	}
	for _, tc := range []struct {
		name  string
		store func(d map[string]any)
	}{
		{name: "in memory"},
		{name: "via the store"},
		{name: "via a store that dropped the error", store: func(d map[string]any) {
			delete(d, plugins.SampleErrorKey)
			d[truncatedKeysKey] = []any{plugins.SampleErrorKey}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			details := res.Details
			if tc.name != "in memory" {
				details = jsonRoundTrip(t, details, false)
			}
			if tc.store != nil {
				tc.store(details)
			}
			e, ok := ErasureOf(details)
			if !ok || e.SampleError == "" {
				t.Fatalf("erasure %+v from details %v; want the sampling error kept", e, details)
			}
			if why, _ := SkipVerify(nil, e); why != "" {
				t.Fatalf("verify skipped as not applicable: %s", why)
			}
			verifyTriesAgainLater(t, be, dev, e, "namespace 2 never sampled", "could not be sampled", string(addr))
		})
	}

	for _, tc := range []struct {
		listed error
		fails  bool
	}{{errors.New("sysfs: size of nvme1n2: input/output error"), true}, {hardware.ErrUnsupported, false}} {
		be := &fakehw.Backend{MediaF: func(context.Context, hardware.Address) ([]hardware.Media, error) { return nil, tc.listed }}
		samples, err := sampleMedia(context.Background(), be, dev)
		if (err != nil) != tc.fails || len(samples) != 0 {
			t.Fatalf("media listing %v: samples %d, error %v; want an error: %v", tc.listed, len(samples), err, tc.fails)
		}
	}
}
