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
	Run         Func
	// CheckArgs validates the step's args from config.
	CheckArgs func(args map[string]any) error
	// Does says in one line what the step runs, for dry runs.
	Does string
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
