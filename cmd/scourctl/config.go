package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/scour-project/scour/config"
)

const (
	// configEnv names scourd's config file, as for scourd itself.
	configEnv         = "SCOUR_CONFIG"
	defaultConfigPath = config.DefaultPath
	// envFileEnv names the environment file scourd's unit loads
	// (deploy/scourd.service: EnvironmentFile=-/etc/scour/scourd.env).
	envFileEnv     = "SCOUR_ENV_FILE"
	defaultEnvFile = "/etc/scour/scourd.env"
)

// configExplicit reports whether the operator named the config file (flag
// or env).
func (c *cli) configExplicit() bool {
	return c.root.PersistentFlags().Changed("config") || os.Getenv(configEnv) != ""
}

// loadConfig reads scourd's configuration the way scourd reads it
// (config.Load: YAML, SCOUR_* overrides, defaults, validation), with the
// overrides scourd gets: those of its environment file when there is one.
// With optional, a default path that does not exist is no error: it
// returns nil and the caller keeps its flags' defaults (scourctl records on
// a machine without scourd).
func (c *cli) loadConfig(optional bool) (*config.Config, error) {
	if optional && !c.configExplicit() {
		if _, err := os.Stat(c.configPath); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	environ, err := c.scourdEnviron(os.Environ())
	if err != nil {
		return nil, err
	}
	c.environ = environ
	cfg, err := config.Load(c.configPath, true, environ)
	if err != nil {
		return nil, fmt.Errorf("%w\n(scourctl reads scourd's configuration; pass --config FILE or set %s)", err, configEnv)
	}
	return cfg, nil
}

// getenv reads scourd's environment as loadConfig found it: the
// Placement client takes its OS_* credentials from there, as scourd does.
func (c *cli) getenv(name string) string {
	for _, kv := range c.environ {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

// scourdEnviron is the environment whose SCOUR_* settings and OS_*
// Placement credentials scourd sees. With an environment file (systemd's
// EnvironmentFile), that is the file: a SCOUR_* setting in the operator's
// shell that scourd does not have would make scourctl read another store
// than scourd, so it is refused, naming the variable. The shell's OS_*
// variables (an operator's sourced admin openrc) are left aside, not
// refused: the Placement client reads the file's, as scourd does. Without
// a file (a container, a test), scourd's environment is the shell's
// (kubectl exec inherits the pod's).
func (c *cli) scourdEnviron(shell []string) ([]string, error) {
	explicit := c.root.PersistentFlags().Changed("env-file") || os.Getenv(envFileEnv) != ""
	raw, err := os.ReadFile(c.envFile)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		return shell, nil
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("reading scourd's environment file %s: %w (run as root, or pass --env-file)", c.envFile, err)
	case err != nil:
		return nil, fmt.Errorf("scourd's environment file: %w", err)
	}
	fileEnv := parseEnvFile(raw)
	known := map[string]string{}
	for _, v := range config.EnvVars() {
		known[v.Name] = v.Key
	}
	var diffs []string
	for _, kv := range shell {
		k, v, _ := strings.Cut(kv, "=")
		key, ok := known[k]
		if !ok {
			continue
		}
		fv, inFile := fileEnv[k]
		switch {
		case !inFile:
			diffs = append(diffs, fmt.Sprintf("%s (%s) is set in your environment but not in %s, which scourd uses", k, key, c.envFile))
		case fv != v:
			diffs = append(diffs, fmt.Sprintf("%s (%s) differs from its value in %s, which scourd uses", k, key, c.envFile))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return nil, fmt.Errorf("scourctl would not see what scourd sees:\n  %s\nunset them (scourctl applies %s itself), or change %s and restart scourd",
			strings.Join(diffs, "\n  "), c.envFile, c.envFile)
	}
	out := make([]string, 0, len(fileEnv))
	for k, v := range fileEnv {
		out = append(out, k+"="+v)
	}
	return out, nil
}

// parseEnvFile reads systemd's EnvironmentFile syntax as far as scour's
// files use it: KEY=VALUE lines, # and ; comments, optional quotes around
// the value, an optional "export ".
func parseEnvFile(b []byte) map[string]string {
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[strings.TrimSpace(k)] = v
	}
	return env
}
