package hardware

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Op is a requirement term's operator. OpHas is membership (no operator
// written); the others compare against an ordered capability's most
// capable element.
type Op uint8

const (
	OpHas Op = iota
	OpEq
	OpNe
	OpLt
	OpLe
	OpGt
	OpGe
)

// operators in parse order: longest first so ">=" wins over ">".
var operators = []struct {
	text string
	op   Op
}{{">=", OpGe}, {"<=", OpLe}, {"==", OpEq}, {"!=", OpNe}, {">", OpGt}, {"<", OpLt}}

func (o Op) String() string {
	for _, x := range operators {
		if x.op == o {
			return x.text
		}
	}
	return ""
}

// Term is one element of a set or ordered requirement.
type Term struct {
	Op      Op
	Operand string
}

func (t Term) String() string { return t.Op.String() + t.Operand }

// Requirement is what a pipeline step (or a flavor-facing trait) needs of
// one capability. Three forms, as in YAML:
//
//	pci.reset: true                  # bool: must be present and true (false: absent or false)
//	pci.driver: [vfio-pci]           # set: all listed values present ("nvme" = one value)
//	nvme.sanitize: ">=block"         # ordered: compare the most capable element
//	nic.firmware.fw: [">=22", "<23"] # terms of a list must all hold
//
// An unset capability is absent: only a `false` bool requirement matches it.
type Requirement struct {
	Name  string
	Kind  ValueKind // KindBool, or KindSet for term lists (membership and comparisons)
	Bool  bool
	Terms []Term
}

// ParseRequirement parses one requirement from its YAML value (bool,
// string, number or a list of strings/numbers). It rejects unknown names
// (wrapping ErrUnknownCapability), values of the wrong shape for a known
// capability, comparison operators on sets and values off a capability's
// scale ("nvme.sanitize: >=blok").
func ParseRequirement(name string, raw any) (Requirement, error) {
	spec, err := specFor(name)
	if err != nil {
		return Requirement{}, err
	}
	r := Requirement{Name: name}
	switch v := raw.(type) {
	case bool:
		r.Kind, r.Bool = KindBool, v
	case []any:
		if len(v) == 0 {
			return r, fmt.Errorf("requirement %s: empty list", name)
		}
		for i, it := range v {
			s, ok := scalarString(it)
			if !ok {
				return r, fmt.Errorf("requirement %s: element %d is %T, want a string", name, i+1, it)
			}
			t, err := parseTerm(s)
			if err != nil {
				return r, fmt.Errorf("requirement %s: %w", name, err)
			}
			r.Terms = append(r.Terms, t)
		}
		r.Kind = KindSet
	case []string:
		anys := make([]any, len(v))
		for i := range v {
			anys[i] = v[i]
		}
		return ParseRequirement(name, anys)
	default:
		s, ok := scalarString(raw)
		if !ok {
			return r, fmt.Errorf("requirement %s: value is %T, want true/false, a string or a list", name, raw)
		}
		t, err := parseTerm(s)
		if err != nil {
			return r, fmt.Errorf("requirement %s: %w", name, err)
		}
		r.Kind, r.Terms = KindSet, []Term{t}
	}
	return r, checkShape(r, spec)
}

func specFor(name string) (CapabilitySpec, error) {
	if name == "" {
		return CapabilitySpec{}, errors.New("requirement with an empty capability name")
	}
	spec, ok := LookupCapability(name)
	if !ok {
		return spec, fmt.Errorf("requirement %s: %w (known names: docs/hardware.md; operator-defined ones start with %q)",
			name, ErrUnknownCapability, CustomPrefix)
	}
	return spec, nil
}

func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	}
	return "", false
}

func parseTerm(s string) (Term, error) {
	s = strings.TrimSpace(s)
	for _, o := range operators {
		if rest, ok := strings.CutPrefix(s, o.text); ok {
			rest = strings.TrimSpace(rest)
			if rest == "" || strings.ContainsAny(rest[:1], "<>=!") {
				return Term{}, fmt.Errorf("%q: operator %s needs a value after it", s, o.text)
			}
			return Term{Op: o.op, Operand: rest}, nil
		}
	}
	if s == "" {
		return Term{}, errors.New("empty value")
	}
	if strings.ContainsAny(s[:1], "=!") {
		return Term{}, fmt.Errorf("%q: unknown operator (use ==, !=, <, <=, >, >=)", s)
	}
	return Term{Op: OpHas, Operand: s}, nil
}

func checkShape(r Requirement, spec CapabilitySpec) error {
	custom := isCustom(r.Name)
	if r.Kind == KindBool {
		if !custom && spec.Kind != KindBool {
			return fmt.Errorf("requirement %s: %s is a %s capability, a true/false requirement cannot match it", r.Name, r.Name, spec.Kind)
		}
		return nil
	}
	if !custom && spec.Kind == KindBool {
		return fmt.Errorf("requirement %s: %s is a bool capability, want true or false", r.Name, r.Name)
	}
	for _, t := range r.Terms {
		if t.Op != OpHas && !custom && spec.Kind == KindSet {
			return fmt.Errorf("requirement %s: %q compares, but %s is a set (comparisons need an ordered capability)", r.Name, t, r.Name)
		}
		if spec.Scale != nil && indexOf(spec.Scale, t.Operand) < 0 {
			return fmt.Errorf("requirement %s: %q is not one of %s", r.Name, t.Operand, strings.Join(spec.Scale, " < "))
		}
	}
	return nil
}

// String renders the requirement in its YAML value form.
func (r Requirement) String() string {
	if r.Kind == KindBool {
		return strconv.FormatBool(r.Bool)
	}
	if len(r.Terms) == 1 {
		return r.Terms[0].String()
	}
	parts := make([]string, len(r.Terms))
	for i, t := range r.Terms {
		parts[i] = t.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Match reports whether caps satisfy r, and why not.
func (r Requirement) Match(caps Capabilities) (ok bool, reason string) {
	v, present := caps[r.Name]
	if r.Kind == KindBool {
		switch {
		case !present && r.Bool:
			return false, fmt.Sprintf("%s: want true, capability absent", r.Name)
		case !present:
			return true, ""
		case v.Kind != KindBool:
			return false, fmt.Sprintf("%s: want %t, have %s value %s", r.Name, r.Bool, v.Kind, v)
		case v.Bool != r.Bool:
			return false, fmt.Sprintf("%s: want %t, have %t", r.Name, r.Bool, v.Bool)
		}
		return true, ""
	}
	if !present {
		return false, fmt.Sprintf("%s: want %s, capability absent", r.Name, r)
	}
	if v.Kind == KindBool {
		return false, fmt.Sprintf("%s: want %s, have bool %s", r.Name, r, v)
	}
	for _, t := range r.Terms {
		if why := matchTerm(r.Name, t, v); why != "" {
			return false, fmt.Sprintf("%s: want %s, have %s%s", r.Name, r, v, why)
		}
	}
	return true, ""
}

// matchTerm returns "" when t holds for v, else a short suffix for the reason.
func matchTerm(name string, t Term, v Value) string {
	if t.Op == OpHas {
		if v.Has(t.Operand) {
			return ""
		}
		return " (" + t.Operand + " missing)"
	}
	if v.Kind != KindOrdered {
		return " (a set cannot be compared)"
	}
	if len(v.Items) == 0 {
		return " (empty)"
	}
	var scale []string
	if spec, ok := LookupCapability(name); ok {
		scale = spec.Scale
	}
	c, ok := compareOrdered(scale, v.Top(), t.Operand)
	if !ok {
		return " (" + v.Top() + " is not on the scale)"
	}
	var hold bool
	switch t.Op {
	case OpEq:
		hold = c == 0
	case OpNe:
		hold = c != 0
	case OpLt:
		hold = c < 0
	case OpLe:
		hold = c <= 0
	case OpGt:
		hold = c > 0
	case OpGe:
		hold = c >= 0
	}
	if hold {
		return ""
	}
	return " (" + v.Top() + " fails " + t.String() + ")"
}

// Requirements is a set of requirements, sorted by capability name. In
// YAML it is a mapping of capability name to requirement value.
type Requirements []Requirement

// ParseRequirements parses every entry of raw and reports every problem.
func ParseRequirements(raw map[string]any) (Requirements, error) {
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	sort.Strings(names)
	var rs Requirements
	var errs []error
	for _, n := range names {
		r, err := ParseRequirement(n, raw[n])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rs = append(rs, r)
	}
	return rs, errors.Join(errs...)
}

// Match reports whether caps satisfy every requirement; unmet lists the
// reason for each one that does not hold, in name order.
func (rs Requirements) Match(caps Capabilities) (ok bool, unmet []string) {
	for _, r := range rs {
		if good, why := r.Match(caps); !good {
			unmet = append(unmet, why)
		}
	}
	return len(unmet) == 0, unmet
}
