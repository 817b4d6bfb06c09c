package hardware

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DefaultSysfsRoot is where the kernel mounts sysfs.
const DefaultSysfsRoot = "/sys"

// FS is a rooted sysfs: tests point it at a fake tree under testdata/ that
// copies the kernel layout, symlinks included. Every sysfs read and write in
// scour goes through it.
type FS string

// NewFS returns the sysfs rooted at root ("" means /sys).
func NewFS(root string) FS {
	if root == "" {
		root = DefaultSysfsRoot
	}
	return FS(root)
}

// Path joins elems under the root.
func (f FS) Path(elems ...string) string {
	return filepath.Join(append([]string{string(f)}, elems...)...)
}

func (f FS) devPath(addr Address, elems ...string) string {
	return f.Path(append([]string{"bus", "pci", "devices", string(addr)}, elems...)...)
}

// PCIDevice is what sysfs says about one PCI function. Fields name the
// sysfs file they come from; optional attributes are pointers.
type PCIDevice struct {
	Address         Address
	Vendor          string // vendor
	Device          string // device
	SubsystemVendor string // subsystem_vendor
	SubsystemDevice string // subsystem_device
	Class           string // class
	Driver          string // basename of readlink driver; "" when unbound
	IOMMUGroup      *int   // basename of readlink iommu_group
	NUMANode        *int   // numa_node; nil when -1 or missing
	Reset           bool   // reset exists
	SRIOVTotalVFs   *int   // sriov_totalvfs
	SRIOVNumVFs     *int   // sriov_numvfs
	// NVMeControllers: entries of nvme/ ("nvme0"), present when bound to nvme.
	NVMeControllers []string
}

// PCIAddresses lists bus/pci/devices.
func (f FS) PCIAddresses() ([]Address, error) {
	ents, err := os.ReadDir(f.Path("bus", "pci", "devices"))
	if err != nil {
		return nil, fmt.Errorf("list PCI devices under %s: %w", f, err)
	}
	var out []Address
	for _, e := range ents {
		if a, err := ParseAddress(e.Name()); err == nil {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// PCIDevice reads the attributes of addr; ErrNoDevice when absent.
func (f FS) PCIDevice(addr Address) (*PCIDevice, error) {
	if _, err := os.Stat(f.devPath(addr)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("PCI device %s (sysfs %s): %w", addr, f, ErrNoDevice)
		}
		return nil, fmt.Errorf("PCI device %s: %w", addr, err)
	}
	d := &PCIDevice{Address: addr}
	var errs []error
	for _, a := range []struct {
		file string
		dst  *string
	}{{"vendor", &d.Vendor}, {"device", &d.Device}, {"subsystem_vendor", &d.SubsystemVendor},
		{"subsystem_device", &d.SubsystemDevice}, {"class", &d.Class}} {
		v, err := f.readAttr(addr, a.file)
		if err != nil {
			errs = append(errs, err)
		}
		*a.dst = v
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	d.Driver = f.linkBase(addr, "driver")
	if g := f.linkBase(addr, "iommu_group"); g != "" {
		if n, err := strconv.Atoi(g); err == nil {
			d.IOMMUGroup = &n
		}
	}
	if n := f.intAttr(addr, "numa_node"); n != nil && *n >= 0 {
		d.NUMANode = n
	}
	_, err := os.Stat(f.devPath(addr, "reset"))
	d.Reset = err == nil
	d.SRIOVTotalVFs = f.intAttr(addr, "sriov_totalvfs")
	d.SRIOVNumVFs = f.intAttr(addr, "sriov_numvfs")
	if ents, err := os.ReadDir(f.devPath(addr, "nvme")); err == nil {
		for _, e := range ents {
			d.NVMeControllers = append(d.NVMeControllers, e.Name())
		}
	}
	return d, nil
}

func (f FS) readAttr(addr Address, name string) (string, error) {
	b, err := os.ReadFile(f.devPath(addr, name))
	if err != nil {
		return "", fmt.Errorf("PCI device %s: read %s: %w", addr, name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (f FS) intAttr(addr Address, name string) *int {
	s, err := f.readAttr(addr, name)
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil
	}
	return &n
}

func (f FS) linkBase(addr Address, name string) string {
	t, err := os.Readlink(f.devPath(addr, name))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// Namespace is an NVMe namespace block device found in sysfs.
type Namespace struct {
	Name string // "nvme0n1"
	Size int64  // bytes (size file is in 512-byte sectors)
}

// NVMeNamespaces lists the namespaces of controller ctrl of addr from
// bus/pci/devices/<addr>/nvme/<ctrl>/, with sizes from block/<ns>/size.
// Without native multipath the entries are the block devices themselves,
// <ctrl>nN. With it (nvme_core.multipath=Y, the default of Debian,
// Ubuntu and RHEL kernels, for a drive whose CMIC says it may have more
// than one controller) the controller holds only the hidden path node
// nvme<S>c<C>n<N>, and the block device to use is the subsystem's head
// nvme<S>n<N> (the kernel's nvme_set_disk_name), which this returns.
// nvme-cli's list is the primary source; this is the fallback, and what
// the wait after a bind to nvme counts.
func (f FS) NVMeNamespaces(addr Address, ctrl string) ([]Namespace, error) {
	dir := f.devPath(addr, "nvme", ctrl)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("NVMe controller %s of %s: %w", ctrl, addr, err)
	}
	var out []Namespace
	for _, e := range ents {
		name, ok := namespaceBlock(ctrl, e.Name())
		if !ok {
			continue
		}
		size, err := f.BlockSize(name)
		if err != nil {
			return nil, fmt.Errorf("namespace %s of %s (controller %s): %w", name, addr, ctrl, err)
		}
		out = append(out, Namespace{Name: name, Size: size})
	}
	return out, nil
}

// namespaceBlock maps an entry of controller ctrl's sysfs directory to
// the namespace block device it stands for: "nvme1n2" to itself, a
// multipath path node "nvme0c1n2" to the head "nvme0n2". The number after
// "c" is not checked against ctrl: 4.x kernels (4.20 at least) wrote the
// controller's cntlid there, later ones its instance, and the node is in
// ctrl's own directory either way. Anything else is not a namespace.
func namespaceBlock(ctrl, entry string) (string, bool) {
	if rest, ok := strings.CutPrefix(entry, ctrl+"n"); ok && isDigits(rest) {
		return entry, true
	}
	rest, ok := strings.CutPrefix(entry, "nvme")
	if !ok {
		return "", false
	}
	subsys, rest, ok := strings.Cut(rest, "c")
	if !ok || !isDigits(subsys) {
		return "", false
	}
	c, nsid, ok := strings.Cut(rest, "n")
	if !ok || !isDigits(c) || !isDigits(nsid) {
		return "", false
	}
	return "nvme" + subsys + "n" + nsid, true
}

// BlockSize returns the size in bytes of block device name from
// block/<name>/size (512-byte sectors, whatever the LBA size).
func (f FS) BlockSize(name string) (int64, error) {
	b, err := os.ReadFile(f.Path("block", name, "size"))
	if err != nil {
		return 0, err
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("block device %s: size %q: %w", name, b, err)
	}
	return sectors * 512, nil
}

// NVMeIdentity reads model, serial and firmware_rev of a controller from
// sysfs (nvme/<ctrl>/...), a fallback when nvme-cli is missing.
func (f FS) NVMeIdentity(addr Address, ctrl string) (model, serial, firmware string) {
	read := func(n string) string {
		b, _ := os.ReadFile(f.devPath(addr, "nvme", ctrl, n))
		return strings.TrimSpace(string(b))
	}
	return read("model"), read("serial"), read("firmware_rev")
}

// WriteReset requests a function-level reset of addr.
func (f FS) WriteReset(addr Address) error {
	p := f.devPath(addr, "reset")
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("PCI device %s has no reset file (%s): %w", addr, p, ErrUnsupported)
	}
	if err := writeSysfs(p, "1"); err != nil {
		return fmt.Errorf("reset PCI device %s: %w", addr, err)
	}
	return nil
}

// Bind binds addr to driver through driver_override, unbind and
// drivers_probe, returning the previous driver ("" when none).
func (f FS) Bind(addr Address, driver string) (string, error) {
	prev := f.linkBase(addr, "driver")
	if _, err := os.Stat(f.devPath(addr)); err != nil {
		return "", fmt.Errorf("bind %s to %s: %w", addr, driver, ErrNoDevice)
	}
	if prev == driver {
		return prev, nil
	}
	if err := writeSysfs(f.devPath(addr, "driver_override"), driver); err != nil {
		return prev, fmt.Errorf("bind %s to %s: set driver_override: %w", addr, driver, err)
	}
	if prev != "" {
		if err := writeSysfs(f.devPath(addr, "driver", "unbind"), string(addr)); err != nil {
			return prev, fmt.Errorf("bind %s to %s: unbind from %s: %w", addr, driver, prev, err)
		}
	}
	if err := writeSysfs(f.Path("bus", "pci", "drivers_probe"), string(addr)); err != nil {
		return prev, fmt.Errorf("bind %s to %s: drivers_probe: %w", addr, driver, err)
	}
	if now := f.linkBase(addr, "driver"); now != driver {
		return prev, fmt.Errorf("bind %s to %s: after drivers_probe the device is bound to %q; is the %s module loaded?", addr, driver, now, driver)
	}
	return prev, nil
}

// writeSysfs writes without O_CREATE or O_TRUNC, as sysfs attributes need.
func writeSysfs(path, value string) error {
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fh.WriteString(value)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}
