package hardware

import (
	"sort"
	"strings"
)

// ValueKind is one of the three capability shapes (Nova's "expose host
// capabilities" design): boolean, set, ordered set.
type ValueKind uint8

const (
	KindBool    ValueKind = iota + 1
	KindSet               // unordered set of strings
	KindOrdered           // ordered set: later elements supersede earlier ones
)

// Value is one capability value. Items holds a set's members, or an
// ordered set's elements in order (for example the sanitize methods a
// controller supports, ordered overwrite < block < crypto, or a firmware
// version as a single element compared by version order).
type Value struct {
	Kind  ValueKind
	Bool  bool
	Items []string
}

// Capabilities maps a capability name ("nvme.sanitize", "pci.reset") to its
// value. An unset capability counts as absent.
type Capabilities map[string]Value

// Bool returns a boolean capability value.
func Bool(b bool) Value { return Value{Kind: KindBool, Bool: b} }

// Set returns a set capability value.
func Set(items ...string) Value { return Value{Kind: KindSet, Items: items} }

// Ordered returns an ordered-set capability value; items go from the
// least to the most capable ("overwrite", "block", "crypto") or hold a
// single version ("22.31.1014").
func Ordered(items ...string) Value { return Value{Kind: KindOrdered, Items: items} }

// Has reports whether a set or ordered value contains item.
func (v Value) Has(item string) bool {
	for _, it := range v.Items {
		if it == item {
			return true
		}
	}
	return false
}

// Top is the most capable element of an ordered value ("" when empty).
func (v Value) Top() string {
	if len(v.Items) == 0 {
		return ""
	}
	return v.Items[len(v.Items)-1]
}

func (k ValueKind) String() string {
	switch k {
	case KindBool:
		return "bool"
	case KindSet:
		return "set"
	case KindOrdered:
		return "ordered"
	}
	return "invalid"
}

// String renders a value the way scourctl and logs show it:
// true/false, [a, b] for a set, [a < b] for an ordered set.
func (v Value) String() string {
	switch v.Kind {
	case KindBool:
		if v.Bool {
			return "true"
		}
		return "false"
	case KindOrdered:
		return "[" + strings.Join(v.Items, " < ") + "]"
	default:
		return "[" + strings.Join(v.Items, ", ") + "]"
	}
}

// Names returns the capability names in sorted order.
func (c Capabilities) Names() []string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Merge returns a copy of c with every value of over set on top
// (operator-declared values win over discovered ones).
func (c Capabilities) Merge(over Capabilities) Capabilities {
	out := make(Capabilities, len(c)+len(over))
	for n, v := range c {
		out[n] = v
	}
	for n, v := range over {
		out[n] = v
	}
	return out
}

// Equal reports whether two values have the same kind and contents
// (ordered items in the same order; set items in the same order too).
func (v Value) Equal(o Value) bool {
	if v.Kind != o.Kind || v.Bool != o.Bool || len(v.Items) != len(o.Items) {
		return false
	}
	for i := range v.Items {
		if v.Items[i] != o.Items[i] {
			return false
		}
	}
	return true
}
