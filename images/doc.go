// Package images resolves the image a cleaning step names (firmware for
// a NIC or GPU, an FPGA bitstream) to verified bytes on local disk.
//
// A step names an image by a Ref: a local file, a Glance image by id, or
// a Glance query (properties and/or tags) that must match exactly one
// active image. Fetch returns an Image only when its bytes were hashed
// and matched what the source vouches for; the caller then programs
// exactly the file at Image.Path, records Image.Record(), and calls
// Image.Release when done (until then a cached file is not evicted).
//
// The contract every Source keeps:
//
//   - An Image is returned only with Image.Path holding bytes whose hash
//     (Image.HashAlgo, Image.HashValue) and size (Image.Size) were checked
//     during this Fetch: streamed from Glance, or re-hashed from the cache.
//     Image.Checked says against what ("sha512" from Glance's multihash,
//     "md5" only where the operator allows the legacy checksum, "sha256"
//     for a local file against its configured sum).
//   - A refused image (hash or size mismatch, not active, no multihash,
//     a query matching zero or several images) is an *Error whose Reason
//     says why and whose message names the image (and the candidates)
//     and what the operator should do. Nothing must be programmed then.
//   - An unavailable source (Glance unreachable, 5xx, a stalled read
//     after bounded retries) is an *Error with Reason ReasonUnavailable:
//     Recoverable() is true, the device stays reserved and the run is
//     tried again later.
//
// Glance (glance.go) is the service; Cache (cache.go) keeps verified
// images content-addressed under the state directory, bounded in size,
// least recently used first out, so a thousand cleanings of one device
// model download once.
package images
