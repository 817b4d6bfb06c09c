package hardware

import (
	"sort"
	"strconv"
	"strings"
)

// TraitShape says whether and how a capability becomes Placement traits.
// Placement traits are plain names: a flavor can require or forbid one,
// not compare values. So only booleans and members of small fixed sets
// become traits; an ordered number becomes a bounded run of bucket
// traits (so "at most N" is one required trait); free values (driver
// names, models, firmware versions, counters) never do: each new value
// would be a new trait for ever.
type TraitShape uint8

const (
	// NoTrait: the capability is never published (free value, or a
	// state that flips with every attach).
	NoTrait TraitShape = iota
	// TraitFlag: a true bool is <NAME>; false publishes nothing.
	TraitFlag
	// TraitMembers: each value that is one of TraitRule.Members is
	// <NAME>_<MEMBER>; other values publish nothing.
	TraitMembers
	// TraitBelow: a number v publishes <NAME>_BELOW_<b> for every bound
	// b of TraitRule.Bounds with v < b (cumulative, so a flavor requires
	// one trait for "less than b").
	TraitBelow
	// TraitOperator: operator-declared custom.* values: a true bool is a
	// flag, each member of a list is <NAME>_<MEMBER> (the operator's own
	// fixed vocabulary), a string (version) publishes nothing.
	TraitOperator
)

// TraitRule is a capability's trait mapping.
type TraitRule struct {
	Shape   TraitShape
	Members []string // TraitMembers: the fixed set
	Bounds  []int    // TraitBelow: fixed bucket boundaries, ascending
	// Changes marks a value that changes during the device's life (wear,
	// health): its traits are left out of StaticTraits, since a trait
	// written once into Nova's configuration would go stale.
	Changes bool
}

// PercentUsedBounds are the fixed bucket boundaries of
// nvme.percent_used traits (NVMe wear, 0 to 255 percent of rated
// endurance): a device at 7 % carries _BELOW_10 ... _BELOW_100.
var PercentUsedBounds = []int{10, 25, 50, 75, 90, 100}

// DeviceKinds is the fixed set of "kind" values.
var DeviceKinds = []string{string(KindNVMe), string(KindGPU), string(KindNIC), string(KindFPGA), string(KindGeneric)}

// Traits renders capabilities as trait names under prefix
// ("CUSTOM_SCOUR_CAP_") by each capability's TraitRule: upper case,
// other characters become "_", names over Placement's 255 characters
// dropped. Unknown capability names publish nothing. Sorted, unique.
func (c Capabilities) Traits(prefix string) []string { return c.traits(prefix, true) }

// StaticTraits is Traits without the capabilities whose value changes
// during the device's life (TraitRule.Changes: wear, health): the traits
// that can be written once into Nova's [pci] device_spec.
func (c Capabilities) StaticTraits(prefix string) []string { return c.traits(prefix, false) }

func (c Capabilities) traits(prefix string, changing bool) []string {
	var out []string
	add := func(parts ...string) {
		t := prefix + traitName(strings.Join(parts, "_"))
		if len(t) <= 255 {
			out = append(out, t)
		}
	}
	for name, v := range c {
		spec, ok := LookupCapability(name)
		if !ok {
			continue
		}
		rule := spec.Trait
		if rule.Changes && !changing {
			continue
		}
		if rule.Shape == TraitOperator {
			switch v.Kind {
			case KindBool:
				rule = TraitRule{Shape: TraitFlag}
			case KindSet:
				rule = TraitRule{Shape: TraitMembers, Members: v.Items}
			default:
				continue
			}
		}
		switch rule.Shape {
		case TraitFlag:
			if v.Kind == KindBool && v.Bool {
				add(name)
			}
		case TraitMembers:
			for _, it := range v.Items {
				if contains(rule.Members, it) {
					add(name, it)
				}
			}
		case TraitBelow:
			n, err := strconv.Atoi(v.Top())
			if err != nil {
				continue
			}
			for _, b := range rule.Bounds {
				if n < b {
					add(name, "BELOW", strconv.Itoa(b))
				}
			}
		}
	}
	sort.Strings(out)
	return compact(out)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func traitName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		}
		return '_'
	}, s)
}
