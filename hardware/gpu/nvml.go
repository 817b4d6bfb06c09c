package gpu

import "fmt"

// nvml is the subset of NVML the scrubber reads: identity and health.
type nvml struct {
	init          func() int32
	shutdown      func() int32
	errorString   func(code int32) string
	handleByBusID func(busID string, h *uintptr) int32
	name          func(h uintptr, s *byte, n uint32) int32
	serial        func(h uintptr, s *byte, n uint32) int32
	vbios         func(h uintptr, s *byte, n uint32) int32
	driverVersion func(s *byte, n uint32) int32
	eccMode       func(h uintptr, current, pending *int32) int32
	retiredPend   func(h uintptr, pending *int32) int32
	remappedRows  func(h uintptr, corr, unc, pending, failed *uint32) int32
	memoryInfo    func(h uintptr, m *nvmlMemory) int32
	// migMode is nil with a driver older than MIG (R450), which no
	// MIG-capable GPU runs on.
	migMode func(h uintptr, current, pending *uint32) int32
}

// nvmlMemory is nvmlMemory_t (nvmlDeviceGetMemoryInfo, version 1).
type nvmlMemory struct {
	Total, Free, Used uint64
}

const nvmlMIGEnabled = 1 // NVML_DEVICE_MIG_ENABLE

const nvmlErrorNotSupported = 3

func loadNVML(path string) (*nvml, error) {
	lib, err := open(path)
	if err != nil {
		return nil, err
	}
	n := &nvml{}
	err = bind(lib, path, []sym{
		{"nvmlInit_v2", &n.init},
		{"nvmlShutdown", &n.shutdown},
		{"nvmlErrorString", &n.errorString},
		{"nvmlDeviceGetHandleByPciBusId_v2", &n.handleByBusID},
		{"nvmlDeviceGetName", &n.name},
		{"nvmlDeviceGetSerial", &n.serial},
		{"nvmlDeviceGetVbiosVersion", &n.vbios},
		{"nvmlSystemGetDriverVersion", &n.driverVersion},
		{"nvmlDeviceGetEccMode", &n.eccMode},
		{"nvmlDeviceGetRetiredPagesPendingStatus", &n.retiredPend},
		{"nvmlDeviceGetRemappedRows", &n.remappedRows},
		{"nvmlDeviceGetMemoryInfo", &n.memoryInfo},
	})
	if err != nil {
		return nil, err
	}
	if bind(lib, path, []sym{{"nvmlDeviceGetMigMode", &n.migMode}}) != nil {
		n.migMode = nil
	}
	return n, nil
}

func (n *nvml) check(call string, code int32) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("%s: NVML error %d (%s)", call, code, n.errorString(code))
}

// Health is what NVML says about the GPU's memory before a scrub.
type Health struct {
	ECC string // "enabled", "disabled" or "not supported"
	// RetiredPagesPending: pages wait for retirement at the next reset.
	RetiredPagesPending *bool
	// Remapped rows (Ampere and later); nil where not supported.
	RemappedCorrectable, RemappedUncorrectable *uint32
	RemapPending, RemapFailed                  *bool
}

// Problem says why the memory is not healthy enough to trust a scrub, or
// "" when it is. Not-supported readings are no problem.
func (h Health) Problem() string {
	switch {
	case h.RemapFailed != nil && *h.RemapFailed:
		return "NVML reports a row remapping failure: the GPU's memory has uncorrectable errors that could not be remapped; retire the GPU"
	case h.RemapPending != nil && *h.RemapPending:
		return "NVML reports row remappings pending: reset the GPU (pci-reset) before it is scrubbed again"
	case h.RetiredPagesPending != nil && *h.RetiredPagesPending:
		return "NVML reports pages pending retirement: reset the GPU (pci-reset) before it is scrubbed again"
	}
	return ""
}

// Identity is what a cleaning record says about the GPU.
type Identity struct {
	Model, Serial, VBIOS, Driver string
}

// Scope is what NVML says about the whole GPU's memory, against which the
// scrub's view through CUDA is checked: with MIG on, the CUDA device a bus
// id resolves to is one instance, a slice of the memory, and a scrub
// "covering" it would leave the rest as the last tenant left it.
type Scope struct {
	// NVMLTotalBytes is the installed memory (nvmlDeviceGetMemoryInfo).
	NVMLTotalBytes uint64
	// MIG is "enabled", "disabled" or "not supported" (a GPU without MIG,
	// or a driver older than MIG); "unknown" when NVML failed to say.
	MIG string
}

// query reads identity, health and scope of busID. Identity strings NVML
// cannot give stay empty; a device NVML does not know is ErrUnsupported.
func (n *nvml) query(busID string) (Identity, Health, Scope, error) {
	var id Identity
	var h Health
	sc := Scope{MIG: "unknown"}
	if err := n.check("nvmlInit_v2", n.init()); err != nil {
		return id, h, sc, fmt.Errorf("%v: %w", err, ErrUnsupported)
	}
	defer n.shutdown()
	var dev uintptr
	if err := n.check("nvmlDeviceGetHandleByPciBusId_v2("+busID+")", n.handleByBusID(busID, &dev)); err != nil {
		return id, h, sc, fmt.Errorf("%v (is it bound to the nvidia driver?): %w", err, ErrUnsupported)
	}
	buf := make([]byte, 96)
	str := func(f func(*byte, uint32) int32) string {
		clear(buf)
		if f(&buf[0], uint32(len(buf))) != 0 {
			return ""
		}
		return cstr(buf)
	}
	id.Model = str(func(b *byte, l uint32) int32 { return n.name(dev, b, l) })
	id.Serial = str(func(b *byte, l uint32) int32 { return n.serial(dev, b, l) })
	id.VBIOS = str(func(b *byte, l uint32) int32 { return n.vbios(dev, b, l) })
	id.Driver = str(n.driverVersion)
	var m nvmlMemory
	if err := n.check("nvmlDeviceGetMemoryInfo", n.memoryInfo(dev, &m)); err != nil {
		return id, n.health(dev), sc, fmt.Errorf("GPU %s: %w: %v: the GPU's installed memory is unknown, so what a scrub covers cannot be checked against it", busID, ErrScope, err)
	}
	sc.NVMLTotalBytes = m.Total
	sc.MIG = "not supported"
	if n.migMode != nil {
		var cur, pend uint32
		switch code := n.migMode(dev, &cur, &pend); {
		case code == 0 && cur == nvmlMIGEnabled:
			sc.MIG = "enabled"
		case code == 0:
			sc.MIG = "disabled"
		case code != nvmlErrorNotSupported:
			sc.MIG = "unknown"
			return id, n.health(dev), sc, fmt.Errorf("GPU %s: %w: %v", busID, ErrScope, n.check("nvmlDeviceGetMigMode", code))
		}
	}
	return id, n.health(dev), sc, nil
}

func (n *nvml) health(dev uintptr) Health {
	h := Health{ECC: "not supported"}
	var cur, pend int32
	if n.eccMode(dev, &cur, &pend) == 0 {
		h.ECC = map[bool]string{true: "enabled", false: "disabled"}[cur == 1]
	}
	var rp int32
	if n.retiredPend(dev, &rp) == 0 {
		h.RetiredPagesPending = ptr(rp != 0)
	}
	var corr, unc, pending, failed uint32
	if n.remappedRows(dev, &corr, &unc, &pending, &failed) == 0 {
		h.RemappedCorrectable, h.RemappedUncorrectable = &corr, &unc
		h.RemapPending, h.RemapFailed = ptr(pending != 0), ptr(failed != 0)
	}
	return h
}

func ptr[T any](v T) *T { return &v }
