package builtin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"syscall"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// namespaceChecker is a backend that can say, before an erase through a
// device's controller, whether its NVM subsystem holds allocated
// namespaces the erase cannot reach (hardware.Real.CheckHiddenNamespaces:
// an error wrapping hardware.ErrHiddenNamespaces; details for the record).
type namespaceChecker interface {
	CheckHiddenNamespaces(ctx context.Context, addr hardware.Address, erase string) (map[string]any, error)
}

var _ namespaceChecker = (*hardware.Real)(nil)

// HiddenNamespaces is the hidden-namespace check an erase (or any work
// that claims to cover the drive) through addr's controller makes first,
// where the backend can make it (the real one; the simulator and test
// fakes cannot, and nothing is checked): erase names the work in the
// backend's messages and details. It returns the details for the step's
// record (hardware.HiddenNamespacesCheckedKey, ...; nil when the drive
// has no namespace management or the backend cannot check), or fails
// closed: an error wrapping hardware.ErrHiddenNamespaces when the
// subsystem holds a namespace attached to no controller (code 12), a
// try-again-later *plugins.Error when the backend reports the check as
// not made (hiddenUnchecked), or the backend's error when it could not
// make it. The built-in overwrite and nvme-erase's fallbacks call it, and
// so does the pipeline before a plugin step that wipes or reads an NVMe
// device's media.
func HiddenNamespaces(ctx context.Context, be hardware.Backend, addr hardware.Address, erase string) (map[string]any, error) {
	return checkHidden(ctx, be, addr, erase, nil)
}

// checkHidden is HiddenNamespaces; shared is why a sanitize was refused
// for a shared subsystem (nil when none was), for hiddenUnchecked's
// message.
func checkHidden(ctx context.Context, be hardware.Backend, addr hardware.Address, erase string, shared error) (map[string]any, error) {
	c, ok := be.(namespaceChecker)
	if !ok {
		return nil, nil
	}
	checked, err := c.CheckHiddenNamespaces(ctx, addr, erase)
	if err != nil {
		return nil, err
	}
	if err := hiddenUnchecked(addr, checked, shared); err != nil {
		return nil, err
	}
	return checked, nil
}

// overwriteAll is the overwrite step and nvme-erase's overwrite fallback:
// it writes every media the backend lists, which are only the namespaces
// attached to the device's controller. A namespace a tenant created and
// detached is not among them, so the record's "every logical block" would
// be false: the backend's hidden-namespace check runs first, and refuses
// (hardware.ErrHiddenNamespaces, nothing written) as before a format, or
// fails closed when it could not be made (hiddenUnchecked, nothing
// written). What it checked goes into the step's details.
func overwriteAll(ctx context.Context, be hardware.Backend, t *Target, o MediaOptions) (*plugins.Result, error) {
	checked, err := HiddenNamespaces(ctx, be, t.Device.Address, "overwrite")
	if err != nil {
		return nil, err
	}
	res, err := onMedia(ctx, be, t, o, false, Overwrite)
	if err != nil {
		return nil, err
	}
	maps.Copy(res.Details, checked)
	return res, nil
}

// Overwrite writes o.Pattern over all of m and syncs it.
func Overwrite(ctx context.Context, m hardware.Media, o MediaOptions, p hardware.Progress) (Stats, error) {
	start := time.Now()
	f, direct, err := openMedia(m.Path, os.O_WRONLY)
	if err != nil {
		return Stats{}, fmt.Errorf("opening media %s for overwrite: %w", m.Path, err)
	}
	defer f.Close()
	size, err := mediaSize(f, m)
	if err != nil {
		return Stats{}, err
	}
	// O_DIRECT needs aligned lengths: the aligned body goes direct, an
	// unaligned tail (only simulated media have one) goes buffered.
	body := size
	if direct {
		body = size &^ (align - 1)
	}
	c := &chunks{size: body, bs: int64(o.BlockSize)}
	write := func(buf []byte, off int64) error {
		if _, err := f.WriteAt(buf, off); err != nil {
			return fmt.Errorf("writing media %s at offset %d: %w", m.Path, off, err)
		}
		return nil
	}
	if err := parallel(ctx, o.QueueDepth, c, p, write, func() []byte { return alignedBuf(o.BlockSize, o.Pattern) }); err != nil {
		if direct && errors.Is(err, syscall.EINVAL) && c.done.Load() == 0 {
			// The file system accepted O_DIRECT at open but not on write.
			return overwriteBuffered(ctx, m, o, p, start)
		}
		return Stats{}, asMediaError(err)
	}
	if tail := size - body; tail > 0 {
		if err := writeTail(m.Path, body, tail, o.Pattern); err != nil {
			return Stats{}, err
		}
	}
	if err := f.Sync(); err != nil {
		return Stats{}, fmt.Errorf("fsync of media %s: %w", m.Path, err)
	}
	return Stats{Bytes: size, Elapsed: time.Since(start), Direct: direct}, nil
}

func overwriteBuffered(ctx context.Context, m hardware.Media, o MediaOptions, p hardware.Progress, start time.Time) (Stats, error) {
	f, err := os.OpenFile(m.Path, os.O_WRONLY, 0)
	if err != nil {
		return Stats{}, fmt.Errorf("opening media %s for overwrite: %w", m.Path, err)
	}
	defer f.Close()
	size, err := mediaSize(f, m)
	if err != nil {
		return Stats{}, err
	}
	c := &chunks{size: size, bs: int64(o.BlockSize)}
	err = parallel(ctx, o.QueueDepth, c, p, func(buf []byte, off int64) error {
		_, err := f.WriteAt(buf, off)
		return err
	}, func() []byte { return alignedBuf(o.BlockSize, o.Pattern) })
	if err != nil {
		return Stats{}, asMediaError(fmt.Errorf("writing media %s: %w", m.Path, err))
	}
	if err := f.Sync(); err != nil {
		return Stats{}, fmt.Errorf("fsync of media %s: %w", m.Path, err)
	}
	return Stats{Bytes: size, Elapsed: time.Since(start)}, nil
}

func writeTail(path string, off, n int64, pattern byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(alignedBuf(int(n), pattern), off); err != nil {
		return fmt.Errorf("writing tail of media %s: %w", path, err)
	}
	return f.Sync()
}

// asMediaError keeps context errors as they are (timeout/cancel) and makes
// I/O errors transient: the run is retried within budget, then quarantined.
func asMediaError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	return &plugins.Error{Code: plugins.CodeTryAgainLater, Msg: err.Error()}
}
