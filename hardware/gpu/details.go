package gpu

import (
	"fmt"
	"time"
)

// Details is the report as cleaning-record details: only what the scrub
// established (a failed scrub has "verified": false).
func (r *Report) Details() map[string]any {
	d := map[string]any{
		"method":        "built-in",
		"total_bytes":   r.TotalBytes,
		"free_bytes":    r.FreeBytes,
		"covered_bytes": r.CoveredBytes,
		"coverage":      r.Coverage(),
		"min_coverage":  r.MinCoverage,
		"chunks":        r.Chunks,
		"pattern":       fmt.Sprintf("%#02x then 0x00", r.Pattern),
		"verified":      r.Verified,
		"verification":  "every covered byte read back (cuMemcpyDtoH) and compared with zero",
		"seconds":       r.Duration.Round(time.Millisecond).Seconds(),
	}
	if r.PinnedReadBuffer {
		d["read_buffer"] = "pinned"
	}
	if r.NonZeroBytes > 0 {
		d["non_zero_bytes"], d["first_non_zero_offset"] = r.NonZeroBytes, r.FirstNonZero
	}
	for k, v := range map[string]string{"gpu_model": r.Identity.Model, "gpu_serial": r.Identity.Serial,
		"vbios": r.Identity.VBIOS, "driver_version": r.Identity.Driver, "ecc": r.Health.ECC} {
		if v != "" {
			d[k] = v
		}
	}
	if r.CUDADriverVersion != 0 {
		d["cuda_driver_version"] = r.CUDADriverVersion
	}
	if h := r.Health; h.RemappedUncorrectable != nil {
		d["remapped_rows_uncorrectable"], d["remapped_rows_correctable"] = *h.RemappedUncorrectable, *h.RemappedCorrectable
	}
	return d
}
