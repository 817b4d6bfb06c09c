/*
 * Stand-in for libcuda.so.1 and libnvidia-ml.so.1: the subset of the CUDA
 * driver API and NVML that scour's GPU scrubber calls, backed by host
 * memory. Built by the tests with gcc (gputest.Build). It proves the Go
 * loader and scrubber, not a GPU: see docs/hardware.md.
 *
 * Fault injection, read at each call from the environment:
 *   SCOUR_FAKE_GPU_MEM=<bytes>       device memory (default 64 MiB)
 *   SCOUR_FAKE_GPU_BUSID=<id>        the one bus id present (default 0000:41:00.0)
 *   SCOUR_FAKE_GPU_MEMFILE=<path>    device memory is this file, shared by every
 *                                    process and never cleared (as a GPU's memory
 *                                    outlives the process that wrote it); without
 *                                    it each allocation starts as tenant data 0x5A
 *   SCOUR_FAKE_CUDA_FAULT=
 *     alloc-limit=<bytes>  cuMemAlloc fails (out of memory) past this many bytes
 *     alloc-error          cuMemAlloc fails with CUDA_ERROR_UNKNOWN
 *     memset-error         cuMemsetD8 fails with CUDA_ERROR_ILLEGAL_ADDRESS
 *     stuck-word           one 8-byte word in the middle keeps tenant data
 *     free-low=<bytes>     cuMemGetInfo reports this much less free memory
 *                          than can be allocated
 *     hang                 cuMemcpyDtoH never returns; it first creates the
 *                          file SCOUR_FAKE_GPU_HUNG names, if set, so a test
 *                          can end the deadline once the call hangs
 *   SCOUR_FAKE_NVML_FAULT=remap-pending | remap-failure | retired-pending
 *                          | mig-enabled (nvmlDeviceGetMigMode: current 1)
 *                          | mig-disabled (a MIG-capable GPU with MIG off;
 *                            without either the GPU has no MIG: NOT_SUPPORTED)
 *                          | mig-error (nvmlDeviceGetMigMode fails: UNKNOWN)
 *   SCOUR_FAKE_NVML_MEM=<bytes>      installed memory NVML reports (default
 *                                    SCOUR_FAKE_GPU_MEM's); set larger to model
 *                                    a CUDA device that is a slice of the GPU
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define CTX_RESERVE (1u << 20)
#define RESIDUE 0x5A

static size_t allocated;
static int ctxs;

static size_t total_mem(void) {
	const char *s = getenv("SCOUR_FAKE_GPU_MEM");
	return s ? strtoull(s, 0, 10) : 64u << 20;
}
static const char *busid(void) {
	const char *s = getenv("SCOUR_FAKE_GPU_BUSID");
	return s ? s : "0000:41:00.0";
}
static int fault(const char *name) {
	const char *s = getenv("SCOUR_FAKE_CUDA_FAULT");
	return s && strncmp(s, name, strlen(name)) == 0;
}

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuDeviceGetByPCIBusId(int *dev, const char *id) {
	if (strcasecmp(id, busid()) != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*dev = 0;
	return 0;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
	(void)dev;
	strncpy(name, "Stand-in GPU (host memory)", len - 1);
	name[len - 1] = 0;
	return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = total_mem(); return 0; }
CUresult cuCtxCreate_v2(void **ctx, unsigned flags, int dev) {
	(void)flags; (void)dev;
	ctxs++;
	*ctx = (void *)(uintptr_t)0xc0ffee;
	return 0;
}
CUresult cuCtxDestroy_v2(void *ctx) { (void)ctx; ctxs--; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
	*total = total_mem();
	*free_ = *total - CTX_RESERVE - allocated;
	if (fault("free-low=")) {
		size_t low = strtoull(getenv("SCOUR_FAKE_CUDA_FAULT") + strlen("free-low="), 0, 10);
		*free_ = *free_ > low ? *free_ - low : 0;
	}
	return 0;
}
/* The shared device memory of SCOUR_FAKE_GPU_MEMFILE, mapped once. */
static char *arena_base;
static size_t arena_off;
static char *arena(void) {
	if (arena_base) return arena_base;
	size_t size = total_mem() + 4096 * sizeof(size_t);
	int fd = open(getenv("SCOUR_FAKE_GPU_MEMFILE"), O_RDWR | O_CREAT, 0600);
	if (fd < 0) return 0;
	if (ftruncate(fd, size) != 0) { close(fd); return 0; }
	void *m = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) return 0;
	return arena_base = m;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	if (fault("alloc-error")) return 999;
	if (fault("alloc-limit=")) {
		size_t lim = strtoull(getenv("SCOUR_FAKE_CUDA_FAULT") + strlen("alloc-limit="), 0, 10);
		if (allocated + n > lim) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	}
	if (allocated + n > total_mem() - CTX_RESERVE) return 2;
	/* size_t header in front records the size for cuMemFree. */
	size_t *h;
	if (getenv("SCOUR_FAKE_GPU_MEMFILE")) {
		char *a = arena();
		if (!a) return 999;
		h = (size_t *)(a + arena_off);
		arena_off += n + sizeof(size_t);
	} else {
		h = malloc(n + sizeof(size_t));
		if (!h) return 2;
		memset(h + 1, RESIDUE, n); /* the last tenant's data */
	}
	*h = n;
	allocated += n;
	*p = (CUdeviceptr)(uintptr_t)(h + 1);
	return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
	size_t *h = (size_t *)(uintptr_t)p - 1;
	allocated -= *h;
	if (!getenv("SCOUR_FAKE_GPU_MEMFILE"))
		free(h);
	else if (allocated == 0)
		arena_off = 0;
	return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
	if (fault("memset-error")) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
	memset((void *)(uintptr_t)p, v, n);
	if (fault("stuck-word") && n >= 16) {
		size_t off = (n / 2) & ~(size_t)7;
		memset((char *)(uintptr_t)p + off, RESIDUE, 8);
	}
	return 0;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	if (fault("hang")) {
		const char *hung = getenv("SCOUR_FAKE_GPU_HUNG");
		if (hung) {
			int fd = open(hung, O_WRONLY | O_CREAT, 0644);
			if (fd >= 0) close(fd);
		}
		for (;;) pause();
	}
	memcpy(dst, (void *)(uintptr_t)src, n);
	return 0;
}
CUresult cuMemAllocHost_v2(void **p, size_t n) {
	*p = malloc(n);
	return *p ? 0 : 2;
}
CUresult cuMemFreeHost(void *p) { free(p); return 0; }
CUresult cuGetErrorString(CUresult r, const char **s) {
	switch (r) {
	case 2: *s = "out of memory"; break;
	case 101: *s = "invalid device ordinal"; break;
	case 700: *s = "an illegal memory access was encountered"; break;
	default: *s = "unknown error";
	}
	return 0;
}

/* ---- NVML ---- */
typedef int nvmlReturn_t;
static int nvml_fault(const char *name) {
	const char *s = getenv("SCOUR_FAKE_NVML_FAULT");
	return s && strcmp(s, name) == 0;
}
nvmlReturn_t nvmlInit_v2(void) { return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { return r == 3 ? "Not Supported" : "Unknown Error"; }
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, void **h) {
	if (strcasecmp(id, busid()) != 0) return 6; /* NVML_ERROR_NOT_FOUND */
	*h = (void *)(uintptr_t)0x1;
	return 0;
}
static nvmlReturn_t str(char *dst, unsigned len, const char *s) {
	if (strlen(s) + 1 > len) return 7; /* INSUFFICIENT_SIZE */
	strcpy(dst, s);
	return 0;
}
nvmlReturn_t nvmlDeviceGetName(void *h, char *s, unsigned n) { (void)h; return str(s, n, "Stand-in GPU (host memory)"); }
nvmlReturn_t nvmlDeviceGetSerial(void *h, char *s, unsigned n) { (void)h; return str(s, n, "STANDIN-0001"); }
nvmlReturn_t nvmlDeviceGetVbiosVersion(void *h, char *s, unsigned n) { (void)h; return str(s, n, "00.00.00.00.00"); }
nvmlReturn_t nvmlSystemGetDriverVersion(char *s, unsigned n) { return str(s, n, "0.0-standin"); }
nvmlReturn_t nvmlDeviceGetEccMode(void *h, int *cur, int *pend) { (void)h; *cur = 1; *pend = 1; return 0; }
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(void *h, int *pending) {
	(void)h;
	*pending = nvml_fault("retired-pending");
	return 0;
}
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
	(void)h;
	const char *s = getenv("SCOUR_FAKE_NVML_MEM");
	m->total = s ? strtoull(s, 0, 10) : total_mem();
	m->used = CTX_RESERVE + allocated;
	m->free = m->total > m->used ? m->total - m->used : 0;
	return 0;
}
nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend) {
	(void)h;
	if (nvml_fault("mig-error")) return 999; /* NVML_ERROR_UNKNOWN */
	if (!nvml_fault("mig-enabled") && !nvml_fault("mig-disabled")) return 3; /* NOT_SUPPORTED */
	*cur = *pend = nvml_fault("mig-enabled");
	return 0;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(void *h, unsigned *corr, unsigned *unc, unsigned *pending, unsigned *failed) {
	(void)h;
	*corr = 0;
	*unc = nvml_fault("remap-failure") ? 3 : 0;
	*pending = nvml_fault("remap-pending");
	*failed = nvml_fault("remap-failure");
	return 0;
}
