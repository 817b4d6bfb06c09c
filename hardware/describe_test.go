package hardware

import (
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	dev := &Device{
		Address: "0000:01:00.0", Kind: KindNVMe, VendorID: "0x144d", DeviceID: "0xa80a", Driver: "nvme", Model: "PM9A3",
		NVMe: &NVMeInfo{Namespaces: []string{"/dev/nvme0n1"}},
		Capabilities: Capabilities{
			"pci.reset": Bool(true), "pci.sriov": Bool(false), "nvme.sanitize": Ordered("block", "crypto"),
			"pci.driver": Set("nvme"), "nic.firmware.fw.version": Ordered("22.31.1014"),
		},
		Absent: map[string]string{"gpu.ecc": "nvidia-smi not installed"},
	}
	r := Describe(dev)
	if r.Capabilities["nvme.sanitize"] != "[block < crypto]" || r.Capabilities["pci.driver"] != "[nvme]" || r.Namespaces[0] != "/dev/nvme0n1" {
		t.Errorf("report %+v", r)
	}
	text := r.Text()
	for _, want := range []string{"0000:01:00.0  nvme  0x144d:0xa80a  driver=nvme", "pci.reset", "absent: nvidia-smi not installed"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}
