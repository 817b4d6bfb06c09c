package hardware

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// UnmarshalYAML reads a mapping of capability name to requirement,
// keeping scalars as written (so "22.10" stays a string, not 22.1).
func (rs *Requirements) UnmarshalYAML(n *yaml.Node) error {
	raw, err := rawMapping(n)
	if err != nil {
		return fmt.Errorf("requirements: %w", err)
	}
	parsed, err := ParseRequirements(raw)
	if err != nil {
		return err
	}
	*rs = parsed
	return nil
}

// rawMapping turns a YAML mapping into name -> bool/string/[]any/nil,
// keeping scalar text exactly as written.
func rawMapping(n *yaml.Node) (map[string]any, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of capability name to value", n.Line)
	}
	out := make(map[string]any, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		out[n.Content[i].Value] = rawNode(n.Content[i+1])
	}
	return out, nil
}

func rawNode(n *yaml.Node) any {
	switch n.Kind {
	case yaml.AliasNode:
		return rawNode(n.Alias)
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			out[i] = rawNode(c)
		}
		return out
	case yaml.MappingNode:
		return map[string]any{}
	}
	switch n.Tag {
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err == nil {
			return b
		}
	case "!!null":
		return nil
	}
	return n.Value
}
