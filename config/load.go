package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// EnvPrefix starts every environment override. The variable for a key is
// the prefix plus the key's YAML path in upper case joined by "_":
// bus.nova.durable -> SCOUR_BUS_NOVA_DURABLE. Lists are comma-separated,
// durations use Go's form ("30s").
const EnvPrefix = "SCOUR_"

// Load reads path (a missing file is an error only when required), applies
// environ's SCOUR_* overrides, fills defaults and validates. The error
// lists every problem; it never contains a secret.
func Load(path string, required bool, environ []string) (*Config, error) {
	return load(path, required, environ, nil)
}

// LoadChecked is Load followed by Check (its OS_* variables from
// environ), with the problems of both in one error: what scourd runs
// before it starts and for --check-config, so an operator sees every
// problem at once, missing Placement credentials included.
func LoadChecked(path string, required bool, environ []string) (*Config, error) {
	return load(path, required, environ, func(c *Config) error {
		return c.Check(func(key string) string { return lookupEnv(environ, key) })
	})
}

func lookupEnv(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func load(path string, required bool, environ []string, check func(*Config) error) (*Config, error) {
	var c Config
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := lint(raw); err != nil {
			return nil, fmt.Errorf("config %s:\n%w", path, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true) // a typo is an error, not a silent default
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("config %s: %s", path, redactYAMLError(err))
		}
		if err := oneDocument(dec); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	case errors.Is(err, fs.ErrNotExist) && !required:
	default:
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := applyEnv(&c, environ); err != nil {
		return nil, err
	}
	c.SetDefaults()
	problems := []error{c.Validate()}
	if check != nil {
		problems = append(problems, check(&c))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("invalid configuration (%s and %s* environment):\n%w", path, EnvPrefix, err)
	}
	return &c, nil
}

// oneDocument refuses a second YAML document after the one decoded (a
// "---" line followed by keys): the decoder reads only the first, so
// whatever the second holds (a profile, a typo) would be silently
// ignored. An empty one (a trailing "---") holds nothing and is let be.
func oneDocument(dec *yaml.Decoder) error {
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("a further YAML document: %s", redactYAMLError(err))
		case len(doc.Content) > 0 && !(doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null"):
			return fmt.Errorf("line %d: a second YAML document starts here (a \"---\" line), and scourd reads only the first: its keys would be ignored; merge them into the first document and remove the \"---\"", doc.Line)
		}
	}
}

// yaml errors quote offending values, which may be a URL with a password.
func redactYAMLError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "://"); i >= 0 {
		return s[:i] + "://*** (value hidden)"
	}
	return s
}

// EnvVar is one supported override.
type EnvVar struct {
	Name string // SCOUR_BUS_URL
	Key  string // bus.url
	Type string
}

// EnvVars lists every override Config supports (for docs and tests).
func EnvVars() []EnvVar {
	var out []EnvVar
	walk(reflect.ValueOf(&Config{}).Elem(), "", func(key string, _ reflect.Value) {
		var c Config
		v := fieldByKey(reflect.ValueOf(&c).Elem(), key)
		out = append(out, EnvVar{Name: envName(key), Key: key, Type: v.Type().String()})
	})
	return out
}

func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// walk calls leaf for every settable scalar/list field with its YAML key.
func walk(v reflect.Value, prefix string, leaf func(key string, f reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		tag, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" && opts == "inline" && v.Field(i).Kind() == reflect.Struct {
			walk(v.Field(i), prefix, leaf)
			continue
		}
		if tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct && f.Type() != reflect.TypeOf(time.Duration(0)) {
			walk(f, key, leaf)
			continue
		}
		if !envSettable(f.Type()) {
			continue // lists of objects and maps come from the file only
		}
		leaf(key, f)
	}
}

func fieldByKey(v reflect.Value, key string) reflect.Value {
	var found reflect.Value
	walk(v, "", func(k string, f reflect.Value) {
		if k == key {
			found = f
		}
	})
	return found
}

func applyEnv(c *Config, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	var errs []error
	walk(reflect.ValueOf(c).Elem(), "", func(key string, f reflect.Value) {
		name := envName(key)
		val, ok := env[name]
		if !ok {
			return
		}
		if err := setValue(f, val); err != nil {
			shown := val
			if strings.Contains(strings.ToLower(key), "url") || strings.Contains(strings.ToLower(key), "password") {
				shown = "(hidden)"
			}
			errs = append(errs, fmt.Errorf("%s=%s (%s): %v", name, shown, key, err))
		}
	})
	return errors.Join(errs...)
}

// envSettable reports the field types an environment variable can set.
func envSettable(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		return true
	case reflect.Slice:
		return t.Elem().Kind() == reflect.String
	}
	return false
}

func setValue(f reflect.Value, s string) error {
	if f.Kind() == reflect.Pointer {
		p := reflect.New(f.Type().Elem())
		if err := setValue(p.Elem(), s); err != nil {
			return err
		}
		f.Set(p)
		return nil
	}
	switch {
	case f.Type() == reflect.TypeOf(time.Duration(0)):
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration; %s", s, durationHint(s))
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(s)
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not a boolean")
		}
		f.SetBool(b)
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		f.SetInt(int64(n))
	case f.Kind() == reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("not a number")
		}
		f.SetFloat(x)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		var items []string
		for _, it := range strings.Split(s, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items = append(items, it)
			}
		}
		f.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("type %s cannot be set from the environment", f.Type())
	}
	return nil
}
