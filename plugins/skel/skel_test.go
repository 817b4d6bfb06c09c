package skel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/scour-project/scour/plugins"
)

func env(cmd string) func(string) string {
	return func(k string) string {
		if k == "SCOUR_COMMAND" {
			return cmd
		}
		return ""
	}
}

func TestRun(t *testing.T) {
	clean := func(_ context.Context, req *plugins.Request, p Progress) (*plugins.Result, error) {
		switch req.Args["mode"] {
		case "fail":
			return nil, plugins.Errorf(plugins.CodeRetire, "worn")
		case "plain":
			return nil, errors.New("disk on fire")
		}
		p(0.5, "half")
		return plugins.OK(map[string]any{"dev": req.Device.Address}), nil
	}
	req := func(version, mode string) string {
		b, _ := json.Marshal(plugins.Request{ProtocolVersion: version, Device: plugins.Device{Address: "0000:01:00.0"}, Args: map[string]any{"mode": mode}})
		return string(b)
	}
	tests := []struct {
		name, cmd, stdin string
		exit             int
		want             []string
	}{
		{"version", "VERSION", "", 0, []string{`{"protocol_version":"1.0","supported_versions":["1.0"]}`}},
		{"clean ok", "CLEAN", req("1.0", ""), 0, []string{`{"progress":0.5,"message":"half"}`, `{"status":"ok","details":{"dev":"0000:01:00.0"}}`}},
		{"clean error", "CLEAN", req("1.0", "fail"), 1, []string{`{"code":13,"msg":"worn"}`}},
		{"plain error", "CLEAN", req("1.0", "plain"), 1, []string{`{"code":12,"msg":"disk on fire"}`}},
		{"check missing", "CHECK", req("1.0", ""), 1, []string{`{"code":2,"msg":"CHECK not implemented by this plugin"}`}},
		{"wrong version", "CLEAN", req("9.9", ""), 1, []string{`{"code":1,"msg":"protocol version \"9.9\" not supported (plugin speaks [1.0])"}`}},
		{"bad json", "CLEAN", "{nope", 1, []string{`"code":4`}},
		{"bad command", "WIPE", "", 1, []string{`"code":4`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := Run(context.Background(), env(tc.cmd), strings.NewReader(tc.stdin), &out, clean, nil, []string{"1.0"})
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if code != tc.exit || len(lines) != len(tc.want) {
				t.Fatalf("exit %d, output %q", code, out.String())
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d %q lacks %q", i, lines[i], w)
				}
			}
		})
	}
}
