package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// Overwrite and verify act on the media the Backend names (namespace block
// devices, simulated media files). Writes are large (default 4 MiB),
// aligned and O_DIRECT so they reach the device rather than the page cache;
// a file system that refuses O_DIRECT gets buffered writes and an fsync.

const align = 4096

func init() {
	register(Spec{
		Name:        "overwrite",
		Destructive: true,
		Does:        "write args.pattern (default zero) over every media path with aligned O_DIRECT writes of args.block_size (default 4MiB), args.queue_depth at once (default 2), then fsync",
		Run:         overwriteStep,
		Needs:       nvmeDriver,
		CheckArgs:   func(a map[string]any) error { _, err := mediaArgs(a, false); return err },
	})
	register(Spec{
		Name:      "verify",
		Does:      "read back every media path with O_DIRECT (args.mode: all, or sample args.samples blocks; default sample 64) and compare with args.pattern, else with what the run's erase step says it leaves (zeros); not applicable after a crypto erase",
		Run:       verifyStep,
		Needs:     nvmeDriver,
		Skip:      SkipVerify,
		CheckArgs: func(a map[string]any) error { _, err := mediaArgs(a, true); return err },
	})
}

// MediaOptions configures Overwrite and Verify.
type MediaOptions struct {
	Pattern    byte
	BlockSize  int
	QueueDepth int
	All        bool // verify every block rather than a sample
	Samples    int
	// Erase names, in a verify mismatch, the erase whose result is read
	// back ("the sanitize-block (NVMe Sanitize, Block Erase)"); "" when
	// the run's erase is unknown.
	Erase string
}

func mediaArgs(a map[string]any, verify bool) (MediaOptions, error) {
	known := []string{"pattern", "block_size", "queue_depth"}
	if verify {
		known = append(known, "mode", "samples")
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	add(onlyArgs(a, known...))
	o := MediaOptions{}
	pat, err := argString(a, "pattern", "zero")
	add(err)
	switch {
	case pat == "zero":
	default:
		n, perr := strconv.ParseUint(strings.TrimPrefix(pat, "0x"), 16, 8)
		if perr != nil {
			add(fmt.Errorf("pattern: %q is neither zero nor a hex byte like 0xff", pat))
		}
		o.Pattern = byte(n)
	}
	bs, err := argInt(a, "block_size", 4<<20)
	add(err)
	if bs < align || bs%align != 0 || bs > 256<<20 {
		add(fmt.Errorf("block_size: %d must be a multiple of %d up to 256MiB", bs, align))
	}
	o.BlockSize = int(bs)
	qd, err := argInt(a, "queue_depth", 2)
	add(err)
	if qd < 1 || qd > 64 {
		add(fmt.Errorf("queue_depth: %d must be 1..64", qd))
	}
	o.QueueDepth = int(qd)
	mode, err := argString(a, "mode", "sample")
	add(err)
	if mode != "sample" && mode != "all" {
		add(fmt.Errorf("mode: %q must be sample or all", mode))
	}
	o.All = mode == "all"
	n, err := argInt(a, "samples", 64)
	add(err)
	if n < 1 {
		add(fmt.Errorf("samples: %d must be at least 1", n))
	}
	o.Samples = int(n)
	return o, errors.Join(errs...)
}

func overwriteStep(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	o, err := mediaArgs(t.Args, false)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	return overwriteAll(ctx, be, t, o)
}

type mediaFunc func(ctx context.Context, m hardware.Media, o MediaOptions, p hardware.Progress) (Stats, error)

func onMedia(ctx context.Context, be hardware.Backend, t *Target, o MediaOptions, verify bool, f mediaFunc) (*plugins.Result, error) {
	media, err := be.Media(ctx, t.Device.Address)
	if err != nil {
		return nil, fmt.Errorf("listing media of %s: %w", t.Device.Address, err)
	}
	if len(media) == 0 {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "%s exposes no media to overwrite (NVMe bound to vfio-pci? give the step driver: nvme)", t.Device.Address)
	}
	var total Stats
	var perMedia []any
	for i, m := range media {
		st, err := f(ctx, m, o, func(x float64) { t.progress((float64(i) + x) / float64(len(media))) })
		if empty := (*emptyMediaError)(nil); errors.As(err, &empty) {
			err = empty.permanent(t.Device.Address)
		}
		if err != nil {
			return nil, withVerification(err, verify, o, total.Bytes, len(media))
		}
		total.Bytes += st.Bytes
		total.Elapsed += st.Elapsed
		total.Direct = st.Direct
		perMedia = append(perMedia, map[string]any{"path": m.Path, "bytes": st.Bytes, "direct": st.Direct, "mib_per_s": st.MiBps()})
	}
	details := map[string]any{"media": perMedia, "bytes": total.Bytes, "mib_per_s": total.MiBps()}
	if !verify {
		details[plugins.TechniqueKey] = fmt.Sprintf("overwrite, 1 pass of 0x%02x over every logical block, O_DIRECT", o.Pattern)
		details[plugins.EraseKey], details[plugins.ExpectKey] = "overwrite", hexByte(o.Pattern)
	}
	if verify && total.Bytes == 0 { // never "passed" having read nothing
		return nil, withVerification(plugins.Errorf(plugins.CodePermanent, "verify of %s read nothing of its media (%s): nothing is proven, the device stays reserved; check its namespaces (nvme list) and release it (scourctl placement unquarantine %s)",
			t.Device.Address, mediaPaths(media), t.Device.Address), verify, o, 0, len(media))
	}
	if verify {
		v := verification(o, total.Bytes, len(media))
		v.Result = "passed"
		details[plugins.VerificationKey] = v.Map()
	}
	return plugins.OK(details), nil
}

// verification describes what a verify step reads and expects.
func verification(o MediaOptions, read int64, media int) plugins.Verification {
	v := plugins.Verification{BytesRead: read, Expected: fmt.Sprintf("every byte 0x%02x", o.Pattern)}
	if o.All {
		v.Method = fmt.Sprintf("read-back with O_DIRECT of every block of %d media", media)
	} else {
		v.Samples = o.Samples
		v.Method = fmt.Sprintf("read-back with O_DIRECT of %d sampled blocks of %d KiB per media (first and last included), %d media", o.Samples, o.BlockSize>>10, media)
	}
	return v
}

// withVerification adds the failed verification to a verify mismatch, so
// the record says what was read and where it differed.
func withVerification(err error, verify bool, o MediaOptions, read int64, media int) error {
	var pe *plugins.Error
	if !verify || !errors.As(err, &pe) || pe.Code != plugins.CodePermanent {
		return err
	}
	v := verification(o, read, media)
	v.Result, v.Mismatch = "failed", pe.Msg
	if pe.Details == nil {
		pe.Details = map[string]any{}
	}
	pe.Details[plugins.VerificationKey] = v.Map()
	return pe
}

// Stats reports what Overwrite or Verify did.
type Stats struct {
	Bytes   int64
	Elapsed time.Duration
	Direct  bool // O_DIRECT was used
}

// MiBps is the throughput in MiB/s.
func (s Stats) MiBps() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Bytes) / (1 << 20) / s.Elapsed.Seconds()
}

// alignedBuf returns n bytes aligned for O_DIRECT, filled with pattern.
func alignedBuf(n int, pattern byte) []byte {
	raw := make([]byte, n+align)
	off := align - int(uintptr(unsafe.Pointer(&raw[0]))%align)
	if off == align {
		off = 0
	}
	b := raw[off : off+n]
	if pattern != 0 {
		for i := range b {
			b[i] = pattern
		}
	}
	return b
}

// openMedia opens m with O_DIRECT when the file system allows it.
func openMedia(path string, flag int) (f *os.File, direct bool, err error) {
	f, err = os.OpenFile(path, flag|syscall.O_DIRECT, 0)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, syscall.EINVAL) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, flag, 0)
	return f, false, err
}

// mediaSize is m.Size, or the size found by seeking to the end (block
// devices report 0 in stat). A media of size 0 is an *emptyMediaError:
// writing or reading nothing of it proves nothing.
func mediaSize(f *os.File, m hardware.Media) (int64, error) {
	if m.Size > 0 {
		return m.Size, nil
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("size of media %s: %w", m.Path, err)
	}
	if size <= 0 {
		return 0, &emptyMediaError{path: m.Path}
	}
	return size, nil
}

// emptyMediaError: Linux gives a namespace whose LBA format the block
// layer cannot do I/O on (extended-LBA metadata without protection
// information, which a tenant with passthrough can set with `nvme format
// -l`) a block device of size 0.
type emptyMediaError struct{ path string }

func (e *emptyMediaError) Error() string { return e.path + " has size 0" }

// permanent is the step's failure for the device at addr.
func (e *emptyMediaError) permanent(addr hardware.Address) *plugins.Error {
	return plugins.Errorf(plugins.CodePermanent, "namespace %s of %s: the kernel exposes it with size 0, "+
		"most likely because its LBA format carries metadata the block layer cannot use (an extended-LBA format without protection information); "+
		"nothing can be written or read through it, so it was neither overwritten nor verified and the tenant's data may still be on it. "+
		"The device stays reserved: reformat the namespace to a plain LBA format (nvme format %s -l 0) or sanitize the drive, then release it (scourctl placement unquarantine %s), which cleans it again",
		e.path, addr, e.path, addr)
}

// EmptyMedia is the permanent failure for namespace path of the device
// at addr that the kernel exposes with size 0, for a step that is not
// run on it: a plugin handed that media would write or read nothing and
// could still answer ok.
func EmptyMedia(addr hardware.Address, path string) *plugins.Error {
	return (&emptyMediaError{path: path}).permanent(addr)
}

// chunks hands out [off, off+n) ranges to workers.
type chunks struct {
	next atomic.Int64
	size int64
	bs   int64
	done atomic.Int64
}

func (c *chunks) take() (off, n int64, ok bool) {
	off = c.next.Add(c.bs) - c.bs
	if off >= c.size {
		return 0, 0, false
	}
	return off, min(c.bs, c.size-off), true
}

// parallel runs fn on qd workers until chunks run out or one fails.
func parallel(ctx context.Context, qd int, c *chunks, p hardware.Progress, fn func(buf []byte, off int64) error, bufs func() []byte) error {
	var wg sync.WaitGroup
	var once sync.Once
	var pmu sync.Mutex // progress callbacks need not be goroutine-safe
	var firstErr error
	stop := make(chan struct{})
	fail := func(err error) { once.Do(func() { firstErr = err; close(stop) }) }
	for range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := bufs()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
				off, n, ok := c.take()
				if !ok {
					return
				}
				if err := fn(buf[:n], off); err != nil {
					fail(err)
					return
				}
				if p != nil {
					pmu.Lock()
					p(float64(c.done.Add(n)) / float64(c.size))
					pmu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
