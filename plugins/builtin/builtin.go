// Package builtin holds scour's built-in cleaning steps. Each step acts on
// the device only through a hardware.Backend (the hardware package is the
// only place that runs tools), except overwrite/verify, which write and
// read the media paths the Backend names. Steps answer with the plugin
// protocol's vocabulary: a *plugins.Result, or a *plugins.Error whose code
// says retry, fail or retire.
package builtin

import (
	"context"
	"sort"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// Target is what a step acts on.
type Target struct {
	Device   *hardware.Device
	Step     string
	Args     map[string]any
	Progress hardware.Progress
	// Erased is what the run's last erasing step reported (nil when none
	// did): verify compares the media with its Expect.
	Erased *Erasure
	// HostSlot, when set, waits for one of the host's host-bound slots
	// (pipelines.max_host_bound_steps) and returns its release: an
	// in-device step, which takes none, calls it before host-bound work of
	// its own (nvme-erase's overwrite fallback). nil: none to take.
	HostSlot func(ctx context.Context) (release func(), err error)
	// Earlier are the details of the run's steps that succeeded before
	// this one, oldest first (fpga-readback finds fpga-program's there).
	Earlier []map[string]any
	// Images resolves Glance image references (nil: none configured;
	// local files need none).
	Images ImageResolver
	// RunPlugin runs the executable plugin at path (one of the step's
	// PluginArgs, checked against plugin_dirs) with a CLEAN request for
	// this device carrying args; nil where the engine runs no plugins.
	RunPlugin func(ctx context.Context, path string, args map[string]any, progress func(float64)) (*plugins.Result, error)
	// Retried: an earlier attempt of this step ran, in this run or before
	// a restart resumed it; whatever it did to the device is unknown, so
	// an "unsupported" now is no refusal before acting.
	Retried bool
	// toolsDone counts this step's tool calls that succeeded (toolRun):
	// an "unsupported" after one is no refusal before acting.
	toolsDone int
}

func (t *Target) progress(f float64) {
	if t.Progress != nil {
		t.Progress(f)
	}
}

// Func runs one step.
type Func func(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error)

// Spec describes a built-in step.
type Spec struct {
	Name string
	// Destructive is the default for the step's destructive flag.
	Destructive bool
	// InDevice: the work runs inside the device (the controller
	// sanitizes, formats, resets, flashes) while scourd only waits, so the
	// step takes no host-bound slot (pipelines.max_host_bound_steps)
	// unless it turns to host-bound work (Target.HostSlot).
	InDevice bool
	Run      Func
	// CheckArgs validates the step's args from config.
	CheckArgs func(args map[string]any) error
	// Does says in one line what the step runs, for dry runs.
	Does string
	// Tools names the external tools the step runs through the backend
	// (hardware.ToolNVMeCLI, ...): the record gives their versions.
	Tools []string
	// Needs is the driver a device of each kind must be bound to for the
	// step to work (an NVMe's controller and namespaces exist only on
	// nvme); a device living on vfio-pci gets it from the step's driver:
	// option. Dry runs warn when neither provides it.
	Needs map[hardware.DeviceKind]string
	// PluginArgs name the args that hold a plugin path (a vendor tool the
	// step runs over the plugin protocol): config validation requires
	// each to lie directly in a plugin_dirs directory.
	PluginArgs []string
	// Skip, when set, says why the step is pointless after the run's last
	// erasure ("" to run it), with details to record: verify after a
	// crypto erase.
	Skip func(args map[string]any, prior *Erasure) (why string, details map[string]any)
}

var registry = map[string]Spec{}

func register(s Spec) { registry[s.Name] = s }

// Lookup finds a built-in step by name.
func Lookup(name string) (Spec, bool) {
	s, ok := registry[name]
	return s, ok
}

// Names lists the built-in steps, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var nvmeDriver = map[hardware.DeviceKind]string{hardware.KindNVMe: "nvme"}

var nvmeCLI = []string{hardware.ToolNVMeCLI}
