package pipeline

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/hardware"
)

// Requires is a mapping of capability name to requirement, as written in
// YAML (`nvme.sanitize: ">=block"`, `pci.reset: true`). Scalars other than
// booleans are kept as written ("22.10" stays a string).
type Requires map[string]any

// UnmarshalYAML keeps scalar text as written.
func (r *Requires) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: requires must be a mapping of capability name to requirement", n.Line)
	}
	out := Requires{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		out[n.Content[i].Value] = rawValue(n.Content[i+1])
	}
	*r = out
	return nil
}

func rawValue(n *yaml.Node) any {
	switch n.Kind {
	case yaml.SequenceNode:
		items := make([]any, len(n.Content))
		for i, c := range n.Content {
			items[i] = rawValue(c)
		}
		return items
	case yaml.ScalarNode:
		if n.Tag == "!!bool" {
			var b bool
			if n.Decode(&b) == nil {
				return b
			}
		}
		return n.Value
	}
	return n.Value
}

// Matcher checks capabilities against parsed requirements.
type Matcher interface {
	Match(caps hardware.Capabilities) (ok bool, unmet []string)
}

// ParseRequirements turns a Requires into a Matcher with the hardware
// package's requirement parser; an empty Requires matches everything.
func ParseRequirements(r Requires) (Matcher, error) {
	return hardware.ParseRequirements(map[string]any(r))
}
