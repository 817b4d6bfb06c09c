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

// sampleMedia reads sampleBlocks blocks of every media of dev, spread
// from the first to the last. It returns none (and why) when the media
// cannot be read: verify then says it cannot compare.
func sampleMedia(ctx context.Context, be hardware.Backend, dev *hardware.Device) ([]BlockSample, string) {
	media, err := be.Media(ctx, dev.Address)
	if err != nil || len(media) == 0 {
		return nil, fmt.Sprintf("media of %s not listed before the erase: %v", dev.Address, err)
	}
	var out []BlockSample
	for i, m := range media {
		s, err := sampleOne(m)
		if err != nil {
			return nil, err.Error()
		}
		for j := range s {
			s[j].Media, s[j].Size, s[j].Serial = i, m.Size, dev.Serial
		}
		out = append(out, s...)
	}
	return out, ""
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
	if informative == 0 {
		v.Result, v.Reason = plugins.VerifyNotApplicable, "every sampled block was uniform before the erase (unwritten?): its change or not proves nothing"
		return plugins.OK(map[string]any{plugins.VerificationKey: v.Map()}), nil
	}
	v.Result = plugins.VerifyPassed
	return plugins.OK(map[string]any{plugins.VerificationKey: v.Map(), "changed_blocks": informative}), nil
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
