package hardware

import (
	"errors"
	"fmt"
	"sort"

	"gopkg.in/yaml.v3"
)

// ParseValue parses an operator-declared capability value from YAML: a
// bool for bool capabilities; a string or list for sets and ordered sets
// (ordered values on a scale are sorted along it). For custom.* names the
// shape decides: bool -> bool, list -> set, string -> ordered (one
// element, compared as a version). Unknown names wrap ErrUnknownCapability.
func ParseValue(name string, raw any) (Value, error) {
	spec, ok := LookupCapability(name)
	if !ok {
		return Value{}, fmt.Errorf("capability %s: %w", name, ErrUnknownCapability)
	}
	kind := spec.Kind
	if isCustom(name) {
		switch raw.(type) {
		case bool:
			kind = KindBool
		case []any, []string:
			kind = KindSet
		default:
			kind = KindOrdered
		}
	}
	if kind == KindBool {
		b, ok := raw.(bool)
		if !ok {
			return Value{}, fmt.Errorf("capability %s: is a bool capability, value %v (%T) is not true/false", name, raw, raw)
		}
		return Bool(b), nil
	}
	items, err := valueItems(raw)
	if err != nil {
		return Value{}, fmt.Errorf("capability %s: %w", name, err)
	}
	if spec.Scale != nil {
		for _, it := range items {
			if indexOf(spec.Scale, it) < 0 {
				return Value{}, fmt.Errorf("capability %s: %q is not one of %v", name, it, spec.Scale)
			}
		}
		sort.Slice(items, func(i, j int) bool { return indexOf(spec.Scale, items[i]) < indexOf(spec.Scale, items[j]) })
	}
	return Value{Kind: kind, Items: items}, nil
}

func valueItems(raw any) ([]string, error) {
	switch v := raw.(type) {
	case []string:
		raw = func() []any {
			out := make([]any, len(v))
			for i := range v {
				out[i] = v[i]
			}
			return out
		}()
	case bool:
		return nil, errors.New("true/false given for a set or ordered capability")
	}
	if list, ok := raw.([]any); ok {
		if len(list) == 0 {
			return nil, errors.New("empty list")
		}
		items := make([]string, 0, len(list))
		for i, it := range list {
			s, ok := scalarString(it)
			if !ok || s == "" {
				return nil, fmt.Errorf("element %d is %v (%T), want a non-empty string", i+1, it, it)
			}
			items = append(items, s)
		}
		return items, nil
	}
	s, ok := scalarString(raw)
	if !ok || s == "" {
		return nil, fmt.Errorf("value %v (%T): want a non-empty string or a list", raw, raw)
	}
	return []string{s}, nil
}

// RawValues holds operator-declared capability values as written in YAML
// (bool, string, number or list), parsed by Config.Validate.
type RawValues map[string]any

// UnmarshalYAML keeps scalar text exactly as written ("22.10" stays a string).
func (rv *RawValues) UnmarshalYAML(n *yaml.Node) error {
	m, err := rawMapping(n)
	if err != nil {
		return err
	}
	*rv = m
	return nil
}
