package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunVersionAndUnknown(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("--version exit %d, stderr %q", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "scourctl ") {
		t.Fatalf("--version printed %q", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"bogus"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "bogus"`) {
		t.Fatalf("unknown command stderr %q", errb.String())
	}
}
