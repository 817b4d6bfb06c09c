package placement

import (
	"os"
	"path/filepath"

	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"gopkg.in/yaml.v3"
)

// endpointInterface is the catalog interface scour looks Placement up
// by: placement.interface when set, else the operator's OpenStack
// settings as the openstack CLI reads them (OS_INTERFACE over the
// clouds.yaml entry's interface), else internal: compute hosts reach
// services on the internal network. file is the clouds.yaml in use ("" for
// the OS_* form, whose OS_INTERFACE getenv gives).
func endpointInterface(cfg Config, getenv func(string) string, file, cloud string) string {
	return coalesce(cfg.Interface, getenv("OS_INTERFACE"), getenv("OS_ENDPOINT_TYPE"), cloudInterface(file, cloud), "internal")
}

// cloudInterface is the interface (or endpoint_type) cloud's entry names
// in file or the secure.yaml beside it (which gophercloud merges over it).
func cloudInterface(file, cloud string) string {
	if file == "" {
		return ""
	}
	for _, f := range []string{filepath.Join(filepath.Dir(file), "secure.yaml"), file} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var c clouds.Clouds
		if yaml.Unmarshal(raw, &c) != nil {
			continue // gophercloud reports the file's error
		}
		if e := c.Clouds[cloud]; coalesce(e.EndpointType, e.Interface) != "" {
			return coalesce(e.EndpointType, e.Interface)
		}
	}
	return ""
}

// findCloudsYAML is the clouds.yaml gophercloud's clouds.Parse would open
// without a location: ./clouds.yaml, the user's ~/.config/openstack/, then
// /etc/openstack/. scour names the one found back to it, so both read the
// same file. "" when there is none (clouds.Parse then says where it
// looked).
func findCloudsYAML() string {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	if d, err := os.UserConfigDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "openstack"))
	}
	dirs = append(dirs, "/etc/openstack")
	for _, d := range dirs {
		f := filepath.Join(d, "clouds.yaml")
		if fh, err := os.Open(f); err == nil { // readable, as clouds.Parse wants it
			fh.Close()
			return f
		}
	}
	return ""
}
