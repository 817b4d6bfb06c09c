package images

import "context"

// Image is an image resolved to verified local bytes.
type Image struct {
	// Path is the local file holding exactly the verified bytes. For a
	// Glance image it lies in the cache: read it, never write it; the
	// cache does not evict it before Release is called.
	Path string
	// ID and Name are Glance's ("" ID for a local file; Name is then the
	// file's base name).
	ID, Name string
	// HashAlgo and HashValue are the hash the bytes were verified
	// against (lower-case hex): Glance's os_hash_algo/os_hash_value, the
	// legacy md5 checksum, or a local file's configured sha256.
	HashAlgo, HashValue string
	// Size in bytes.
	Size int64
	// Properties are the image's Glance properties (string-valued ones;
	// none for a local file).
	Properties map[string]string
	// Source is "glance" or "file".
	Source string
	// Checked says how the bytes were verified: the algorithm compared
	// ("sha512", "md5" for the legacy checksum an operator allowed,
	// "sha256" for a local file). Always set on a returned Image.
	Checked string
	// Cached is true when the bytes came from the cache (re-hashed), not
	// from the network.
	Cached bool
	// Release says the caller is done with Path: it deletes a local
	// file's private copy, and lets the cache evict a Glance image's
	// entry again (until then it is pinned). Call it once the image was
	// used (more calls do nothing); always set on a returned Image.
	Release func()
}

// Record is the image as a step's details and the cleaning record name
// it (claims.RecordImage's fields).
func (img Image) Record() map[string]any {
	return map[string]any{"id": img.ID, "name": img.Name, "hash_algo": img.HashAlgo, "hash_value": img.HashValue,
		"size": img.Size, "source": img.Source, "checked": img.Checked}
}

// Source fetches images. Implementations keep the package contract (see
// the package doc): a returned Image is verified, a refusal is an *Error.
type Source interface {
	Fetch(ctx context.Context, ref Ref) (Image, error)
}
