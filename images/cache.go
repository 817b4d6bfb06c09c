package images

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Cache keeps verified images content-addressed: <dir>/<algo>/<hash>.
// Every Get re-hashes the file (a bit flipped on disk is caught, the
// entry removed and the image fetched again); the total size stays under
// max by evicting the least recently used entries (mtime, set on each
// use) when a new one is added.
type Cache struct {
	dir string
	max int64

	mu    sync.Mutex
	locks map[string]*sync.Mutex // one fetch per key at a time
	// pins counts the users of each entry (by path): an entry a step
	// still uses is never evicted (pin, Image.Release).
	pins map[string]int
	now  func() time.Time
}

// OpenCache creates dir (0700) when missing and removes partial files a
// crash left behind.
func OpenCache(dir string, max int64) (*Cache, error) {
	if max <= 0 {
		return nil, fmt.Errorf("images cache %s: max size %d must be positive", dir, max)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("images cache: %w (check images.cache_dir)", err)
	}
	tmp, _ := filepath.Glob(filepath.Join(dir, "*", ".partial-*"))
	for _, p := range tmp {
		_ = os.Remove(p)
	}
	return &Cache{dir: dir, max: max, locks: map[string]*sync.Mutex{}, pins: map[string]int{}, now: time.Now}, nil
}

// Max is the largest total size the cache keeps.
func (c *Cache) Max() int64 { return c.max }

func (c *Cache) path(algo, sum string) string { return filepath.Join(c.dir, algo, sum) }

// lock serialises work on one key (two cleanings of the same model
// download once); the returned func unlocks.
func (c *Cache) lock(algo, sum string) func() {
	c.mu.Lock()
	k := algo + "/" + sum
	l, ok := c.locks[k]
	if !ok {
		l = &sync.Mutex{}
		c.locks[k] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// pin keeps the entry algo/sum from eviction until the returned func
// (idempotent) is called: Fetch pins an entry before it checks or writes
// it and hands the unpin to the image's user, so that another image's
// fetch cannot evict the file between Fetch returning it and the step
// programming it. Pinned entries still count against max; the cache may
// exceed it while they are in use.
func (c *Cache) pin(algo, sum string) func() {
	p := c.path(algo, sum)
	c.mu.Lock()
	c.pins[p]++
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.pins[p]--; c.pins[p] <= 0 {
			delete(c.pins, p)
		}
	})
}

// errCorrupt means a cache entry no longer hashes to its name.
var errCorrupt = errors.New("cache entry corrupted")

// get returns the entry's path when it exists and still hashes to sum
// with size bytes. A corrupted entry is removed and reported as
// errCorrupt (the caller fetches again); a missing one is ok=false.
func (c *Cache) get(algo, sum string, size int64) (string, bool, error) {
	if err := checkHashValue(algo, sum); err != nil {
		return "", false, fmt.Errorf("images cache: %w: not a cache key", err) // Glance.check refuses it first
	}
	p := c.path(algo, sum)
	got, n, err := hashFile(p, algo)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil || got != sum || n != size {
		_ = os.Remove(p)
		return "", false, fmt.Errorf("%w: %s hashes to %s (%d bytes), want %s (%d bytes); removed, fetching again (read error: %v)", errCorrupt, p, got, n, sum, size, err)
	}
	t := c.now()
	_ = os.Chtimes(p, t, t)
	return p, true, nil
}

// put writes an entry through fill into a partial file that becomes the
// entry only when verify accepts it; then it evicts old entries to stay
// under max. fill writes the bytes; verify is given what was written.
func (c *Cache) put(algo, sum string, fill func(w io.Writer) error, verify func() error) (string, error) {
	if err := checkHashValue(algo, sum); err != nil {
		return "", fmt.Errorf("images cache: %w: not a cache key", err)
	}
	dir := filepath.Join(c.dir, algo)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".partial-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if err := fill(f); err != nil {
		f.Close()
		return "", err
	}
	// No fsync: every use re-hashes the entry, so one torn by a crash is
	// caught and fetched again.
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := verify(); err != nil {
		return "", err
	}
	_ = os.Chmod(tmp, 0o400)
	p := c.path(algo, sum)
	if err := os.Rename(tmp, p); err != nil {
		return "", err
	}
	c.evict(p)
	return p, nil
}

type entry struct {
	path string
	size int64
	used time.Time
}

// evict removes least recently used entries, never keep nor a pinned
// one, until the total fits max.
func (c *Cache) evict(keep string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []entry
	var total int64
	_ = filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".partial-") {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		all = append(all, entry{p, fi.Size(), fi.ModTime()})
		total += fi.Size()
		return nil
	})
	slices.SortFunc(all, func(a, b entry) int { return a.used.Compare(b.used) })
	for _, e := range all {
		if total <= c.max {
			return
		}
		if e.path == keep || c.pins[e.path] > 0 {
			continue
		}
		if os.Remove(e.path) == nil {
			total -= e.size
		}
	}
}
