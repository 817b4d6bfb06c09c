package builtin

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// verifyStep reads every media path back and compares it with what the
// run's erase left: args.pattern when given, else the Expect of the
// run's last erasure (Target.Erased), else zero. Its details hold a
// plugins.Verification, on failure too.
func verifyStep(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	o, err := mediaArgs(t.Args, true)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	if _, given := t.Args["pattern"]; !given && t.Erased != nil {
		if why, details := SkipVerify(t.Args, t.Erased); why != "" {
			return plugins.OK(details), nil
		}
		if t.Erased.Expect == plugins.ExpectNone {
			return verifyChanged(ctx, be, t)
		}
		n, perr := strconv.ParseUint(strings.TrimPrefix(t.Erased.Expect, "0x"), 16, 8)
		if perr != nil {
			return nil, plugins.Errorf(plugins.CodeInvalidConfig, "verify of %s: the erase step reported expect %q, not a byte", t.Device.Address, t.Erased.Expect)
		}
		o.Pattern = byte(n)
	}
	if e := t.Erased; e != nil {
		o.Erase = "the " + e.ID
		if e.Technique != "" {
			o.Erase += " (" + e.Technique + ")"
		}
	}
	return onMedia(ctx, be, t, o, true, Verify)
}

// SkipVerify says why reading the media back proves nothing after the
// run's erasure (a crypto erase leaves noise, not a pattern), with the
// details to record, or "" when a read-back is meaningful. An explicit
// args.pattern always verifies.
func SkipVerify(args map[string]any, prior *Erasure) (string, map[string]any) {
	if prior == nil || prior.Expect != plugins.ExpectNone || prior.Sampled {
		return "", nil
	}
	if _, given := args["pattern"]; given {
		return "", nil
	}
	why := fmt.Sprintf("not applicable after %s (%s): the data reads back as noise, so no pattern can be compared, and no blocks could be sampled before the erase to check they changed; the proof is the controller's successful completion of the erase", prior.ID, prior.Technique)
	v := plugins.Verification{Method: "none (nothing read)", Expected: "nothing: " + prior.ID + " leaves noise", Result: plugins.VerifyNotApplicable, Reason: why}
	return why, map[string]any{plugins.VerificationKey: v.Map()}
}

// Verify reads m back (all of it, or o.Samples blocks including the first
// and the last) with O_DIRECT, so the page cache cannot answer for the
// device, and fails permanently on the first byte that is not o.Pattern.
func Verify(ctx context.Context, m hardware.Media, o MediaOptions, p hardware.Progress) (Stats, error) {
	start := time.Now()
	f, direct, err := openMedia(m.Path, os.O_RDONLY)
	if err != nil {
		return Stats{}, fmt.Errorf("opening media %s for verify: %w", m.Path, err)
	}
	defer f.Close()
	size, err := mediaSize(f, m)
	if err != nil {
		return Stats{}, err
	}
	bs := int64(o.BlockSize)
	blocks := (size + bs - 1) / bs
	var offsets []int64
	if o.All || int64(o.Samples) >= blocks {
		for i := range blocks {
			offsets = append(offsets, i*bs)
		}
	} else {
		offsets = []int64{0, (blocks - 1) * bs}
		for len(offsets) < o.Samples {
			offsets = append(offsets, rand.Int64N(blocks)*bs)
		}
	}
	want := alignedBuf(o.BlockSize, o.Pattern)
	buf := alignedBuf(o.BlockSize, 0)
	var read int64
	for i, off := range offsets {
		if err := ctx.Err(); err != nil {
			return Stats{}, err
		}
		n := min(bs, size-off)
		got, err := readBlock(f, m.Path, buf, off, n, direct)
		if err != nil {
			return Stats{}, asMediaError(err)
		}
		if !bytes.Equal(got, want[:len(got)]) {
			bad := firstDiff(got, want)
			erase, cause := o.Erase, "did not reach the device"
			if erase == "" {
				erase = "the erase"
			}
			if !strings.HasPrefix(erase, "the overwrite") {
				cause += fmt.Sprintf(", or the device reads erased blocks as something other than %#x (verify's args.pattern says what they read)", o.Pattern)
			}
			return Stats{}, &plugins.Error{Code: plugins.CodePermanent,
				Msg:     fmt.Sprintf("verify of media %s failed: byte at offset %d is %#x, want %#x: %s %s", m.Path, off+int64(bad), got[bad], o.Pattern, erase, cause),
				Details: map[string]any{"path": m.Path, "offset": off + int64(bad)}}
		}
		read += int64(len(got))
		if p != nil {
			p(float64(i+1) / float64(len(offsets)))
		}
	}
	return Stats{Bytes: read, Elapsed: time.Since(start), Direct: direct}, nil
}

// readBlock reads n bytes at off; with O_DIRECT an unaligned tail is read
// through a second, buffered descriptor.
func readBlock(f *os.File, path string, buf []byte, off, n int64, direct bool) ([]byte, error) {
	if direct && n%align != 0 {
		g, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		f = g
	}
	got, err := f.ReadAt(buf[:n], off)
	if err != nil && int64(got) != n {
		return nil, fmt.Errorf("reading media %s at offset %d: %w", path, off, err)
	}
	return buf[:n], nil
}

func firstDiff(got, want []byte) int {
	for i := range got {
		if got[i] != want[i] {
			return i
		}
	}
	return 0
}
