package builtin

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Args from YAML arrive as int, float64, string or bool; these helpers read
// them with a default and say clearly what was wrong.

func argInt(args map[string]any, name string, def int64) (int64, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return def, nil
	}
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case uint64:
		return int64(x), nil
	case float64:
		if x != float64(int64(x)) {
			return 0, fmt.Errorf("%s: %v is not a whole number", name, x)
		}
		return int64(x), nil
	case string:
		n, err := strconv.ParseInt(x, 0, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a number", name, x)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: %v (%T) is not a number", name, v, v)
}

func argString(args map[string]any, name, def string) (string, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: %v (%T) is not a string", name, v, v)
	}
	return s, nil
}

func argBool(args map[string]any, name string, def bool) (bool, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s: %v (%T) is not true or false", name, v, v)
	}
	return b, nil
}

func argDuration(args map[string]any, name string, def time.Duration) (time.Duration, error) {
	s, err := argString(args, name, "")
	if err != nil || s == "" {
		return def, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive duration like 5s", name, s)
	}
	return d, nil
}

// onlyArgs rejects args the step does not know, so a typo is not silently
// ignored (a misspelt threshold must not become the default).
func onlyArgs(args map[string]any, known ...string) error {
	var errs []error
	for k := range args {
		found := false
		for _, n := range known {
			found = found || n == k
		}
		if !found {
			errs = append(errs, fmt.Errorf("unknown argument %q (known: %v)", k, known))
		}
	}
	return errors.Join(errs...)
}
