package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// lint checks a configuration file's YAML against Config's shape before it
// is decoded, so every mistake is reported at once as the operator wrote
// it: the key path, the line, the offending value and a hint (the key that
// was meant, how to write a duration), instead of the decoder's first
// error in Go's type names ("field prefetsh not found in type bus.Config").
// It walks sections whose types decode themselves too (hardware:), where
// the decoder's unknown-key check does not reach.
func lint(raw []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil // the decoder reports syntax errors with their line
	}
	var probs []problem
	lintNode(&doc, reflect.TypeOf(Config{}), "", &probs)
	if len(probs) == 0 {
		return nil
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].line < probs[j].line })
	errs := make([]error, len(probs))
	for i, p := range probs {
		errs[i] = fmt.Errorf("line %d: %s", p.line, credentialsRE.ReplaceAllString(p.msg, "://***@"))
	}
	return errors.Join(errs...)
}

type problem struct {
	line int
	msg  string
}

var (
	// credentialsRE finds the user:password of a URL quoted in a message.
	credentialsRE   = regexp.MustCompile(`://[^@/\s"]*@`)
	durationType    = reflect.TypeOf(time.Duration(0))
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
)

func lintNode(n *yaml.Node, t reflect.Type, path string, probs *[]problem) {
	bad := func(format string, a ...any) {
		*probs = append(*probs, problem{n.Line, fmt.Sprintf(format, a...)})
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			lintNode(c, t, path, probs)
		}
		return
	case yaml.AliasNode:
		lintNode(n.Alias, t, path, probs)
		return
	}
	if n.Kind == 0 || n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A type that decodes itself is walked only where it is a plain
	// struct written as a mapping (hardware.Config's short form
	// `hardware: simulated` is its own business).
	if reflect.PointerTo(t).Implements(unmarshalerType) && (t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode) {
		return
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			bad("%s: want a duration such as 30s, got a %s", path, kindName(n))
			return
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			bad("%s: %q is not a duration; %s", path, n.Value, durationHint(n.Value))
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad("%s: want a mapping of keys, got %s", orTop(path), describe(n))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				*probs = append(*probs, problem{k.Line, unknownKey(join(path, k.Value), k.Value, fields)})
				continue
			}
			lintNode(v, ft, join(path, k.Value), probs)
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad("%s: want a mapping, got %s", path, describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			lintNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), probs)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if t.Elem().Kind() == reflect.String && n.Kind == yaml.ScalarNode {
				bad("%s: want a list, got %s; write [%s]", path, describe(n), n.Value)
				return
			}
			bad("%s: want a list, got %s", path, describe(n))
			return
		}
		for i, c := range n.Content {
			lintNode(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), probs)
		}
	case t.Kind() == reflect.Interface:
	case n.Kind != yaml.ScalarNode:
		bad("%s: want a %s, got a %s", path, scalarName(t), kindName(n))
	default:
		lintScalar(n, t, path, bad)
	}
}

func lintScalar(n *yaml.Node, t reflect.Type, path string, bad func(string, ...any)) {
	switch t.Kind() {
	case reflect.Bool:
		if n.Tag != "!!bool" {
			bad("%s: %q is not a boolean; write true or false", path, n.Value)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Tag != "!!int" {
			bad("%s: %q is not an integer", path, n.Value)
		}
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
			bad("%s: %q is not a number", path, n.Value)
		}
	}
}

// durationHint says how to write the value as a Go duration.
func durationHint(v string) string {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return fmt.Sprintf("write %ss (a duration needs a unit: ms, s, m, h)", v)
	}
	return "write it as a number with a unit, e.g. 500ms, 10s, 5m, 1h30m"
}

// yamlFields maps the YAML keys of struct t (inline structs included) to
// their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name) // yaml.v3's default key
		}
		out[tag] = f.Type
	}
	return out
}

// unknownKey names the key meant, when one is close enough.
func unknownKey(path, key string, fields map[string]reflect.Type) string {
	best, bestD := "", 1<<30
	for k := range fields {
		if d := editDistance(key, k); d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	msg := fmt.Sprintf("%s: unknown key %q", path, key)
	if best != "" && bestD <= max(2, len(key)/3) {
		msg += fmt.Sprintf("; did you mean %q?", best)
	} else {
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		msg += fmt.Sprintf(" (known keys here: %s)", strings.Join(keys, ", "))
	}
	return msg
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "scalar"
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return fmt.Sprintf("%q", n.Value)
	}
	return "a " + kindName(n)
}

func scalarName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return "integer"
}
