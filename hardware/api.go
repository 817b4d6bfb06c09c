package hardware

// This file is the contract between hardware discovery/actions (this
// package) and the cleaning pipeline (pipeline/, plugins/). The pipeline
// never reads sysfs or runs hardware tools itself: it calls a Backend.
// Two Backends exist: the real one (rooted sysfs + nvme-cli, nvidia-smi,
// devlink through a command runner) and the simulator (hardware: simulated).

import (
	"context"
	"time"
)

// Address is a normalised PCI address: lower-case, with domain
// ("0000:81:00.0"). Nova upper-cases addresses in RP names; sysfs and
// nvme-cli use lower case. Build one with ParseAddress.
type Address string

// DeviceKind is the broad family of a device, used to pick tools.
type DeviceKind string

const (
	KindNVMe    DeviceKind = "nvme"
	KindGPU     DeviceKind = "gpu"
	KindNIC     DeviceKind = "nic"
	KindFPGA    DeviceKind = "fpga"
	KindGeneric DeviceKind = "generic"
)

// Device is what discovery knows about one PCI function. Optional facts
// are pointers or nil sub-structs; Absent explains missing capabilities
// (tool not installed, device bound to vfio-pci, file missing).
type Device struct {
	Address         Address
	Kind            DeviceKind
	VendorID        string // "0x144d" as in sysfs
	DeviceID        string
	SubsystemVendor string
	SubsystemDevice string
	Class           string // "0x010802"
	Driver          string // bound driver, "" when none
	IOMMUGroup      *int
	NUMANode        *int
	ResetAvailable  bool // sysfs reset file present
	SRIOVTotalVFs   *int
	SRIOVNumVFs     *int

	Model    string
	Serial   string
	Firmware string
	// SerialSource says where Serial came from: SerialFromVPD for the PCI
	// function's VPD "SN", "" for what the device's driver or tool reports
	// (NVMe Identify Controller, remembered from it, nvidia-smi, devlink).
	// The two need not be the same string for one drive: compare serials
	// only from the same source.
	SerialSource string

	NVMe *NVMeInfo
	GPU  *GPUInfo
	NIC  *NICInfo
	FPGA *FPGAInfo

	Capabilities Capabilities
	Absent       map[string]string // capability name -> why it is absent
}

// SerialFromVPD is Device.SerialSource for a serial read from PCI VPD.
const SerialFromVPD = "vpd"

// NVMeInfo comes from nvme-cli (list -v, id-ctrl, smart-log).
type NVMeInfo struct {
	Controller  string   // "nvme0"; empty when bound to vfio-pci
	Namespaces  []string // block device paths, "/dev/nvme0n1"
	OACS        int
	FNA         int
	SANICAP     int
	Smart       *SmartLog
	BoundToVFIO bool
	// CMIC is id-ctrl's cmic: bit 1 says the NVM subsystem may contain
	// two or more controllers.
	CMIC int
	// Subsystem is the controller's nvme-subsystem in sysfs
	// ("nvme-subsys0"), OtherControllers the other controllers it holds
	// ("nvme1"): a sanitize through this controller erases their
	// namespaces too (SubsystemSanitizeRefusal).
	Subsystem        string
	OtherControllers []string
	// SubsystemSanitizeAllowed: the operator listed the device in
	// hardware.allow_subsystem_sanitize, so a sanitize may run although
	// the subsystem is shared.
	SubsystemSanitizeAllowed bool
	// Remembered: the device is not on nvme now; Model, Serial, Firmware
	// and OACS/FNA/SANICAP are what it reported the last time this process
	// saw it bound to nvme (NVMeMemo). SMART is never remembered.
	Remembered bool
}

// SmartLog is the subset of `nvme smart-log -o json` scour uses.
type SmartLog struct {
	CriticalWarning int
	PercentUsed     int
	AvailSpare      int
	SpareThresh     int
}

// GPUInfo comes from nvidia-smi or generic PCI facts.
type GPUInfo struct {
	Name         string
	MemoryMiB    int
	DriverVer    string
	ECCSupported bool
	ResetSupport bool
}

// NICInfo comes from devlink dev info -j.
type NICInfo struct {
	DevlinkHandle string            // "pci/0000:3b:00.0"
	Firmware      map[string]string // "fw.mgmt" -> "22.31.1014"
}

// SanitizeAction is an NVMe sanitize action.
type SanitizeAction string

const (
	SanitizeCrypto    SanitizeAction = "crypto"    // -a 4
	SanitizeBlock     SanitizeAction = "block"     // -a 2
	SanitizeOverwrite SanitizeAction = "overwrite" // -a 3
)

// Progress receives a step's progress as a fraction 0..1.
type Progress func(fraction float64)

// Media is something that holds tenant data and can be overwritten and
// verified: a namespace's block device, or a simulated media file.
type Media struct {
	Path string
	Size int64
}

// FirmwareImage is a known-good image from config.
type FirmwareImage struct {
	// Path is the image's name relative to the kernel's firmware search
	// path (FirmwareDir), as devlink dev flash takes it: the kernel, not
	// scourd, opens the file. CheckFirmwareName says which names are
	// allowed.
	Path      string
	SHA256    string // hex; the caller checks the file FirmwareDir/Path before Flash
	Component string // devlink component, optional
	Version   string // expected version after flashing
}

// Backend is everything the pipeline may ask of the hardware. Every call
// takes a context whose deadline bounds tool runs; a cancelled call kills
// the tool's whole process group. Errors wrap ErrUnsupported when the
// device cannot do the thing, and ErrToolMissing when a tool is absent.
type Backend interface {
	// Discover returns what this host knows about addr (sysfs + tools +
	// operator-declared capabilities). It is not an error for tools to be
	// missing: see Device.Absent.
	Discover(ctx context.Context, addr Address) (*Device, error)
	// List returns the PCI addresses present on this host.
	List(ctx context.Context) ([]Address, error)

	SmartLog(ctx context.Context, addr Address) (*SmartLog, error)
	Sanitize(ctx context.Context, addr Address, action SanitizeAction, poll time.Duration, p Progress) error
	Format(ctx context.Context, addr Address, namespace string, ses int) error
	// Media lists what an overwrite step must wipe on addr.
	Media(ctx context.Context, addr Address) ([]Media, error)
	// ScrubGPU zeroes the device memory it can reach and verifies it
	// (the real backend: all it can allocate, at least
	// hardware.gpu_scrub.min_coverage of it, else an error).
	ScrubGPU(ctx context.Context, addr Address, p Progress) error
	FlashFirmware(ctx context.Context, addr Address, img FirmwareImage, p Progress) error
	FirmwareVersions(ctx context.Context, addr Address) (map[string]string, error)
	// ResetFunction performs a PCI function-level reset via sysfs.
	ResetFunction(ctx context.Context, addr Address) error
	// BindDriver unbinds addr from its driver and binds it to driver
	// (driver_override + drivers_probe), returning the previous driver.
	BindDriver(ctx context.Context, addr Address, driver string) (previous string, err error)
}
