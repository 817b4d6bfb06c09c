// Package gpu is scour's built-in NVIDIA GPU memory scrubber. It loads the
// CUDA driver API (libcuda.so.1) and NVML (libnvidia-ml.so.1) at run time
// with purego, so scour's binaries stay static (CGO_ENABLED=0) and run on
// hosts without the NVIDIA driver; there Scrub answers ErrUnsupported.
//
// A scrub, all on one OS thread (a CUDA context is current per thread):
//
//	NVML health gate (ECC, retired pages, remapped rows) + identity
//	  -> cuDeviceGetByPCIBusId -> cuCtxCreate
//	  -> NVML scope gate: MIG mode on (or unreadable) refuses (ErrScope)
//	  -> cuMemAlloc until allocation fails: chunks of 256 MiB, halving on
//	     out of memory down to 64 KiB fragments
//	  -> CUDA's total far below NVML's installed memory refuses (ErrScope)
//	  -> coverage = allocated / total (the rest, mostly the scrub's own
//	     context, is neither written nor read; the report says how much)
//	  -> cuMemsetD8 pattern, spot-check the pattern reached every chunk
//	  -> cuMemsetD8 0 -> read every byte back (cuMemcpyDtoH) and count non-zero
//	  -> free, cuCtxDestroy
//	  -> fail closed when coverage < MinCoverage or any byte is non-zero
//
// A driver call that never returns cannot be interrupted from Go: Scrub
// returns when ctx ends, the stuck call keeps its thread, and further
// scrubs of that GPU in the same process are refused (ErrBusy). scourd
// runs the scrubber as its own process (cmd/scour-gpu-scrub) and kills it
// at the step's timeout; loading libcuda also needs the dynamic loader and
// libc, which that process has and scourd, static, does not.
package gpu
