package images

import (
	"crypto/md5" //nolint:gosec // Glance's legacy checksum, used only where the operator allows it
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
)

// newHash returns the hash Glance names algo (os_hash_algo is a Python
// hashlib name; Glance's default is sha512).
func newHash(algo string) (hash.Hash, error) {
	switch algo {
	case "sha512":
		return sha512.New(), nil
	case "sha384":
		return sha512.New384(), nil
	case "sha256":
		return sha256.New(), nil
	case "sha224":
		return sha256.New224(), nil
	case "md5":
		return md5.New(), nil //nolint:gosec // see the import
	}
	return nil, fmt.Errorf("hash algorithm %q is not one scour verifies (sha512, sha384, sha256, sha224)", algo)
}

// checkHashValue reports whether v is a digest of algo as Glance records
// it: lower-case hex, two digits per byte of the digest. The cache names
// its entries by it (<algo>/<value>), so a value that is anything else
// (a "../../victim" in the image's record) must never reach a file name.
func checkHashValue(algo, v string) error {
	h, err := newHash(algo)
	if err != nil {
		return err
	}
	if len(v) != 2*h.Size() {
		return fmt.Errorf("%s hash value %q is not %d hex digits", algo, v, 2*h.Size())
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%s hash value %q is not lower-case hex", algo, v)
		}
	}
	return nil
}

// hashFile hashes path with algo and counts its bytes.
func hashFile(path, algo string) (sum string, n int64, err error) {
	h, err := newHash(algo)
	if err != nil {
		return "", 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	n, err = io.Copy(h, f)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
