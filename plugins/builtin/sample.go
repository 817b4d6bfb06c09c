package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// A crypto erase leaves noise, so no pattern can be compared after it.
// What can be checked is that the tenant's data is gone where it was: an
// erasing step that is about to crypto-erase reads a few blocks of every
// namespace first (O_DIRECT) and keeps their hashes; verify reads the same
// blocks afterwards and fails if one of them still holds what it held.
//
// A namespace's kernel name (/dev/nvme1n1) is no identity: it changes when
// the controller is re-bound (vfio-pci <-> nvme) or the host reboots, and
// the old name may then be another drive's. A sample is therefore keyed
// by the namespace's place in the Backend's media list of this PCI device
// plus the controller's serial and the namespace's size; verify asks the
// Backend for the device's media now and reads the namespace found there,
// and fails when a sample matches none.

// preEraseKey holds the samples in an erasing step's details.
const preEraseKey = "pre_erase_samples"

// sampleBlocks is how many blocks of each media are sampled.
const sampleBlocks = 16

// BlockSample is one block read before a crypto erase.
type BlockSample struct {
	Path    string `json:"path"` // the namespace's kernel name when sampled, for the record
	Offset  int64  `json:"offset"`
	SHA256  string `json:"sha256"`
	Uniform bool   `json:"uniform"` // every byte the same: its change proves nothing
	// Media is the namespace's index in the Backend's media list of the
	// device (-1: sampled by a scourd that did not record it), Size its
	// size (0: unknown) and Serial the controller's serial ("" unknown).
	Media  int    `json:"media"`
	Size   int64  `json:"size,omitempty"`
	Serial string `json:"serial,omitempty"`
}

// maxSampleError bounds the sampling error kept in an erase step's
// details (the claims store keeps it whatever their size).
const maxSampleError = 512

// sampleMedia reads sampleBlocks blocks of every media of dev, spread
// from the first to the last. A device without media (none listed, or
// hardware.ErrUnsupported: no block device to read) gives none and no
// error: verify then says it cannot compare. Media that cannot be listed
// otherwise, and each namespace that cannot be read, are an error
// (naming device and namespace) beside the samples of the namespaces
// that could be read: a tenant's unreadable namespace must not make the
// erase look like one with nothing to sample, or hide the others'.
func sampleMedia(ctx context.Context, be hardware.Backend, dev *hardware.Device) ([]BlockSample, error) {
	media, err := be.Media(ctx, dev.Address)
	if errors.Is(err, hardware.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("media of %s not listed to sample them before the erase: %w", dev.Address, err)
	}
	var out []BlockSample
	var errs []error
	for i, m := range media {
		if err := ctx.Err(); err != nil {
			return out, errors.Join(append(errs, err)...)
		}
		s, err := sampleOne(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("namespace %d of %s: %w", i+1, dev.Address, err))
			continue
		}
		for j := range s {
			s[j].Media, s[j].Size, s[j].Serial = i, m.Size, dev.Serial
		}
		out = append(out, s...)
	}
	return out, errors.Join(errs...)
}

// bounded is s cut to at most n bytes (on a rune boundary), marked.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len(" [truncated]")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + " [truncated]"
}

func sampleOne(m hardware.Media) ([]BlockSample, error) {
	f, direct, err := openMedia(m.Path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("opening media %s to sample it before the erase: %w", m.Path, err)
	}
	defer f.Close()
	size, err := mediaSize(f, m)
	if empty := (*emptyMediaError)(nil); errors.As(err, &empty) {
		return nil, nil // nothing to sample; the other namespaces still are
	}
	if err != nil {
		return nil, err
	}
	blocks := size / align
	if blocks == 0 {
		return nil, nil
	}
	buf := alignedBuf(align, 0)
	var out []BlockSample
	seen := map[int64]bool{}
	for i := int64(0); i < sampleBlocks; i++ {
		off := (blocks - 1) * i / (sampleBlocks - 1) * align
		if seen[off] {
			continue
		}
		seen[off] = true
		got, err := readBlock(f, m.Path, buf, off, align, direct)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(got)
		out = append(out, BlockSample{Path: m.Path, Offset: off, SHA256: hex.EncodeToString(sum[:]),
			Uniform: len(bytes.Trim(got, string(got[:1]))) == 0})
	}
	return out, nil
}

// samplesOf reads samples back from details (the structs, or their JSON
// form after a checkpoint store).
func samplesOf(details map[string]any) []BlockSample {
	switch v := details[preEraseKey].(type) {
	case []BlockSample:
		return v
	case []any:
		var out []BlockSample
		for _, x := range v {
			m, _ := x.(map[string]any)
			s := BlockSample{}
			s.Path, _ = m["path"].(string)
			s.SHA256, _ = m["sha256"].(string)
			s.Uniform, _ = m["uniform"].(bool)
			s.Serial, _ = m["serial"].(string)
			s.Offset, _ = argInt(m, "offset", 0)
			s.Size, _ = argInt(m, "size", 0)
			i, _ := argInt(m, "media", -1) // absent: stored before samples were keyed
			s.Media = int(i)
			if s.Path != "" && s.SHA256 != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// currentPath finds where sample s's namespace is now among media, this
// device's media as the Backend lists them; "" with why when it cannot be
// told (a namespace gone or resized, another controller in the slot).
func currentPath(s BlockSample, media []hardware.Media, dev *hardware.Device) (string, string) {
	if s.Serial != "" && s.Serial != dev.Serial {
		return "", fmt.Sprintf("the controller at %s now reports serial %q, not %q as when the blocks were sampled", dev.Address, dev.Serial, s.Serial)
	}
	if s.Media < 0 { // sampled before samples were keyed: its name must still be one of this device's
		for _, m := range media {
			if m.Path == s.Path {
				return m.Path, ""
			}
		}
		return "", fmt.Sprintf("%s, sampled before the erase, is not one of %s's namespaces now (%s)", s.Path, dev.Address, mediaPaths(media))
	}
	if s.Media >= len(media) {
		return "", fmt.Sprintf("namespace %d of %s (%s when sampled) is gone: the device lists %d now (%s)", s.Media+1, dev.Address, s.Path, len(media), mediaPaths(media))
	}
	m := media[s.Media]
	if s.Size > 0 && m.Size > 0 && s.Size != m.Size {
		return "", fmt.Sprintf("namespace %d of %s (%s when sampled) held %d bytes, %s now holds %d", s.Media+1, dev.Address, s.Path, s.Size, m.Path, m.Size)
	}
	return m.Path, ""
}

func mediaPaths(media []hardware.Media) string {
	var p []string
	for _, m := range media {
		p = append(p, m.Path)
	}
	return strings.Join(p, ", ")
}

// verifyChanged reads the sampled blocks again after a crypto erase, from
// the namespaces the Backend names for the device now.
func verifyChanged(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	e, dev := t.Erased, t.Device
	v := plugins.Verification{
		Method:   fmt.Sprintf("read-back O_DIRECT of %d blocks of 4 KiB sampled before the %s, compared with their pre-erase SHA-256", len(e.Samples), e.ID),
		Expected: "every sampled block that held data differs from before the erase",
	}
	failed := func(mismatch string) error {
		v.Result, v.Mismatch = plugins.VerifyFailed, mismatch
		return &plugins.Error{Code: plugins.CodePermanent, Msg: "verify of " + v.Mismatch,
			Details: map[string]any{plugins.VerificationKey: v.Map()}}
	}
	if e.SamplesLost {
		return nil, samplesLost(v, dev.Address, e.ID)
	}
	media, err := be.Media(ctx, dev.Address)
	if err != nil {
		return nil, fmt.Errorf("listing media of %s to verify the %s: %w", dev.Address, e.ID, err)
	}
	informative := 0
	for _, s := range e.Samples {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path, why := currentPath(s, media, dev)
		if path == "" {
			return nil, failed(fmt.Sprintf("%s after the %s: %s; the blocks sampled before the erase cannot be found, so whether the tenant's data is gone is unknown; the device stays reserved: check which drive is at %s and clean it again", dev.Address, e.ID, why, dev.Address))
		}
		f, direct, err := openMedia(path, os.O_RDONLY)
		if err != nil {
			return nil, asMediaError(fmt.Errorf("opening media %s for verify: %w", path, err))
		}
		got, err := readBlock(f, path, alignedBuf(align, 0), s.Offset, align, direct)
		f.Close()
		if err != nil {
			return nil, asMediaError(err)
		}
		v.BytesRead += int64(len(got))
		if s.Uniform {
			continue
		}
		informative++
		if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) == s.SHA256 {
			return nil, failed(fmt.Sprintf("block at offset %d of %s (device %s) is unchanged by the %s: the tenant's data is still readable", s.Offset, path, dev.Address, e.ID))
		}
	}
	v.Samples = len(e.Samples)
	if e.SampleError != "" {
		return nil, samplesMissing(v, dev.Address, e.ID, e.SampleError)
	}
	if informative == 0 {
		v.Result, v.Reason = plugins.VerifyNotApplicable, "every sampled block was uniform before the erase (unwritten?): its change or not proves nothing"
		return plugins.OK(map[string]any{plugins.VerificationKey: v.Map()}), nil
	}
	v.Result = plugins.VerifyPassed
	return plugins.OK(map[string]any{plugins.VerificationKey: v.Map(), "changed_blocks": informative}), nil
}

// samplesMissing fails a verify whose erase step could not sample every
// media before the erase (why: a namespace it could not read, media it
// could not list): whether that media's data is gone cannot be checked,
// which is no "not applicable", and the samples of the others prove
// nothing about it. Try-again-later keeps the device reserved; the next
// run repeats the erase and samples again (a read error that lasts ends
// in quarantine once the run budget is spent).
func samplesMissing(v plugins.Verification, addr hardware.Address, erase, why string) error {
	v.Result = plugins.VerifyFailed
	v.Reason = fmt.Sprintf("some media of %s could not be sampled before the %s (%s): whether their data is gone cannot be checked", addr, erase, why)
	return &plugins.Error{Code: plugins.CodeTryAgainLater, Details: map[string]any{plugins.VerificationKey: v.Map(), plugins.SampleErrorKey: why},
		Msg: fmt.Sprintf("verify of %s: %s; the device is not called clean and stays reserved, and the next run repeats the erase. If this recurs, check the namespace's reads (dmesg; nvme id-ns: an LBA format with metadata or protection information a tenant set), reformat it (nvme format <ns> -l 0) or sanitize the drive, then release the device", addr, v.Reason)}
}

// samplesLost fails a verify whose erase step sampled blocks that its
// stored record no longer holds (scourd restarted between the erase and
// this verify, and the claims store dropped them for size): nothing can
// be compared, which is no "not applicable". Try-again-later ends the run
// with the device reserved, and the next run repeats the erase and
// verifies it from samples in memory.
func samplesLost(v plugins.Verification, addr hardware.Address, erase string) error {
	v.Method = "none (the blocks sampled before the erase are not in its stored record)"
	v.Result = plugins.VerifyFailed
	v.Reason = fmt.Sprintf("the blocks sampled before the %s were not kept in its stored record (dropped for size), and scourd restarted before this verify: whether the tenant's data is gone cannot be checked", erase)
	return &plugins.Error{Code: plugins.CodeTryAgainLater, Details: map[string]any{plugins.VerificationKey: v.Map()},
		Msg: fmt.Sprintf("verify of %s: %s; the device is not called clean and stays reserved; the next run repeats the erase (nothing to do unless this recurs: then keep scourd running between the erase and its verify)", addr, v.Reason)}
}
