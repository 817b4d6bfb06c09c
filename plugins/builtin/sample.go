package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// A crypto erase leaves noise, so no pattern can be compared after it.
// What can be checked is that the tenant's data is gone where it was: an
// erasing step that is about to crypto-erase reads a few blocks of every
// namespace first (O_DIRECT) and keeps their hashes; verify reads the same
// blocks afterwards and fails if one of them still holds what it held.

// preEraseKey holds the samples in an erasing step's details.
const preEraseKey = "pre_erase_samples"

// sampleBlocks is how many blocks of each media are sampled.
const sampleBlocks = 16

// BlockSample is one block read before a crypto erase.
type BlockSample struct {
	Path    string `json:"path"`
	Offset  int64  `json:"offset"`
	SHA256  string `json:"sha256"`
	Uniform bool   `json:"uniform"` // every byte the same: its change proves nothing
}

// sampleMedia reads sampleBlocks blocks of every media of dev, spread
// from the first to the last. It returns none (and why) when the media
// cannot be read: verify then says it cannot compare.
func sampleMedia(ctx context.Context, be hardware.Backend, addr hardware.Address) ([]BlockSample, string) {
	media, err := be.Media(ctx, addr)
	if err != nil || len(media) == 0 {
		return nil, fmt.Sprintf("media of %s not listed before the erase: %v", addr, err)
	}
	var out []BlockSample
	for _, m := range media {
		s, err := sampleOne(m)
		if err != nil {
			return nil, err.Error()
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
			switch o := m["offset"].(type) {
			case float64:
				s.Offset = int64(o)
			case int64:
				s.Offset = o
			}
			if s.Path != "" && s.SHA256 != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// verifyChanged reads the sampled blocks again after a crypto erase.
func verifyChanged(ctx context.Context, e *Erasure) (*plugins.Result, error) {
	v := plugins.Verification{
		Method:   fmt.Sprintf("read-back O_DIRECT of %d blocks of 4 KiB sampled before the %s, compared with their pre-erase SHA-256", len(e.Samples), e.ID),
		Expected: "every sampled block that held data differs from before the erase",
	}
	informative := 0
	for _, s := range e.Samples {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, direct, err := openMedia(s.Path, os.O_RDONLY)
		if err != nil {
			return nil, asMediaError(fmt.Errorf("opening media %s for verify: %w", s.Path, err))
		}
		got, err := readBlock(f, s.Path, alignedBuf(align, 0), s.Offset, align, direct)
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
			v.Result, v.Mismatch = plugins.VerifyFailed, fmt.Sprintf("block at offset %d of %s is unchanged by the %s: the tenant's data is still readable", s.Offset, s.Path, e.ID)
			return nil, &plugins.Error{Code: plugins.CodePermanent, Msg: "verify of " + v.Mismatch,
				Details: map[string]any{plugins.VerificationKey: v.Map()}}
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
