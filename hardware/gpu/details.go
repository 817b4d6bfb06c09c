package gpu

import (
	"fmt"
	"time"
)

// Details is the report as cleaning-record details: only what the scrub
// established (a failed scrub has "verified": false). "verified" is about
// the covered bytes only: uncovered_bytes and not_covered say what the
// scrub did not reach, which may hold the last tenant's data.
func (r *Report) Details() map[string]any {
	d := map[string]any{
		"method":          "built-in",
		"total_bytes":     r.TotalBytes,
		"free_bytes":      r.FreeBytes,
		"covered_bytes":   r.CoveredBytes,
		"uncovered_bytes": r.Uncovered(),
		"coverage":        r.Coverage(),
		"min_coverage":    r.MinCoverage,
		"chunks":          r.Chunks,
		"fragments":       r.Fragments,
		"pattern":         fmt.Sprintf("%#02x then 0x00", r.Pattern),
		"verified":        r.Verified,
		"verification": fmt.Sprintf("the %d covered bytes (%.3f%% of the %d bytes CUDA reports) written with the pattern, zeroed, and every one read back (cuMemcpyDtoH) and compared with zero; not all device memory",
			r.CoveredBytes, 100*r.Coverage(), r.TotalBytes),
		"not_covered": fmt.Sprintf("%d bytes (%.3f%%) of the memory CUDA reports were neither written nor read: the scrubber's own CUDA context, memory the driver or another process holds, and what no allocation could reach; they may still hold the last tenant's data",
			r.Uncovered(), 100*(1-r.Coverage())),
		"mig_mode": r.Scope.MIG,
		"seconds":  r.Duration.Round(time.Millisecond).Seconds(),
	}
	if r.TotalBytes == 0 {
		d["not_covered"] = "unknown: the scrub did not get as far as reading the device's memory size"
	}
	if n := r.Scope.NVMLTotalBytes; n > 0 {
		d["nvml_total_bytes"] = n
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
