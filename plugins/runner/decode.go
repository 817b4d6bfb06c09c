package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/scour-project/scour/plugins"
)

// decodeOutput applies the protocol to what a plugin printed: zero or more
// progress objects, then one final object that is a result ("status"), a
// version answer ("supported_versions") or an error ("code"). The exit
// status must agree: 0 with a result, non-zero with an error.
func decodeOutput(out []byte, exitCode int, stderr string, fail func(int, string, string, ...any) error) (*output, error) {
	var final map[string]json.RawMessage
	var finalRaw json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if exitCode != 0 {
				return nil, fail(plugins.CodeProtocol, stderr, "exited with status %d and printed no valid JSON error (%v)", exitCode, err)
			}
			return nil, fail(plugins.CodeProtocol, stderr, "stdout is not a sequence of JSON objects: %v", err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fail(plugins.CodeProtocol, stderr, "stdout holds a JSON value that is not an object: %.80s", raw)
		}
		if isProgressOnly(obj) {
			continue
		}
		final, finalRaw = obj, raw
	}
	if final == nil {
		if exitCode != 0 {
			return nil, fail(plugins.CodeProtocol, stderr, "exited with status %d without printing an error object", exitCode)
		}
		return &output{stderr: stderr}, nil
	}
	if _, ok := final["code"]; ok {
		var pe plugins.Error
		if err := json.Unmarshal(finalRaw, &pe); err != nil || pe.Code <= 0 {
			return nil, fail(plugins.CodeProtocol, stderr, "error object has no valid positive code: %.200s", finalRaw)
		}
		pe.Stderr = stderr
		return nil, &pe
	}
	if exitCode != 0 {
		return nil, fail(plugins.CodeProtocol, stderr, "exited with status %d but printed a non-error object", exitCode)
	}
	if _, ok := final["supported_versions"]; ok {
		var v plugins.VersionResult
		if err := json.Unmarshal(finalRaw, &v); err != nil || len(v.SupportedVersions) == 0 {
			return nil, fail(plugins.CodeProtocol, stderr, "invalid VERSION answer: %.200s", finalRaw)
		}
		return &output{version: &v, stderr: stderr}, nil
	}
	var res plugins.Result
	if err := json.Unmarshal(finalRaw, &res); err != nil {
		return nil, fail(plugins.CodeProtocol, stderr, "invalid result: %v", err)
	}
	if res.Status != plugins.StatusOK {
		return nil, fail(plugins.CodeProtocol, stderr, "result status %q is not %q (failures are error objects with a code)", res.Status, plugins.StatusOK)
	}
	res.Stderr = stderr
	return &output{result: &res, stderr: stderr}, nil
}

func isProgressOnly(obj map[string]json.RawMessage) bool {
	if _, ok := obj["progress"]; !ok {
		return false
	}
	for k := range obj {
		if k != "progress" && k != "message" {
			return false
		}
	}
	return true
}

// progressOf parses one stdout line as a progress object.
func progressOf(line []byte) (float64, bool) {
	if len(line) == 0 || line[0] != '{' {
		return 0, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(line, &obj) != nil || !isProgressOnly(obj) {
		return 0, false
	}
	var f float64
	if json.Unmarshal(obj["progress"], &f) != nil {
		return 0, false
	}
	return min(max(f, 0), 1), true
}
