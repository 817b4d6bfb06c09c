package runner

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/scour-project/scour/plugins"
)

// MinimalPath is the only PATH a plugin sees.
const MinimalPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var argNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// Environ builds a plugin's whole environment: nothing is inherited from
// scour. Scalar step args (from the operator's config, never from a
// notification) are also exported as SCOUR_ARG_<NAME> so shell plugins need
// no JSON parser; SCOUR_MEDIA lists media paths, one per line.
func Environ(cmd plugins.Command, version string, req *plugins.Request) []string {
	env := []string{
		"PATH=" + MinimalPath,
		"LC_ALL=C",
		"SCOUR_COMMAND=" + string(cmd),
		"SCOUR_PROTOCOL_VERSION=" + version,
	}
	if req == nil {
		return env
	}
	env = append(env,
		"SCOUR_STEP="+req.Step,
		"SCOUR_PCI_ADDRESS="+req.Device.Address,
		"SCOUR_DEVICE_KIND="+req.Device.Kind,
		"SCOUR_RP_UUID="+req.ResourceProvider.UUID,
	)
	if len(req.Device.Media) > 0 {
		paths := make([]string, len(req.Device.Media))
		for i, m := range req.Device.Media {
			paths[i] = m.Path
		}
		env = append(env, "SCOUR_MEDIA="+strings.Join(paths, "\n"))
	}
	names := make([]string, 0, len(req.Args))
	for k := range req.Args {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !argNameRE.MatchString(k) {
			continue
		}
		name := "SCOUR_ARG_" + strings.ToUpper(k) + "="
		switch v := req.Args[k].(type) {
		case float64: // JSON and YAML numbers: print 1048576, not 1.048576e+06
			env = append(env, name+strconv.FormatFloat(v, 'f', -1, 64))
		case string, bool, int, int64, uint64:
			env = append(env, fmt.Sprintf("%s%v", name, v))
		}
	}
	return env
}
