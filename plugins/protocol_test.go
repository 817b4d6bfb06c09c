package plugins

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/scour-project/scour/hardware"
)

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		code int
	}{
		{nil, 0},
		{Errorf(CodeRetire, "worn"), CodeRetire},
		{fmt.Errorf("step x: %w", Errorf(142, "vendor")), 142},
		{fmt.Errorf("sanitize: %w", hardware.ErrUnsupported), CodeUnsupported},
		{fmt.Errorf("nvme: %w", hardware.ErrToolMissing), CodePermanent},
		{fmt.Errorf("format: %w", hardware.ErrHiddenNamespaces), CodePermanent},
		{fmt.Errorf("run: %w", context.DeadlineExceeded), CodeTimeout},
		{errors.New("EIO"), CodeTryAgainLater},
	}
	for _, tc := range tests {
		if got := CodeOf(tc.err); got != tc.code {
			t.Errorf("CodeOf(%v) = %d, want %d", tc.err, got, tc.code)
		}
		if tc.err != nil && AsError(tc.err).Code != tc.code {
			t.Errorf("AsError(%v).Code = %d", tc.err, AsError(tc.err).Code)
		}
	}
}

func TestNegotiate(t *testing.T) {
	if v, err := Negotiate([]string{"2.0", "1.0"}, []string{"0.9", "1.0"}); err != nil || v != "1.0" {
		t.Fatalf("Negotiate = %q, %v", v, err)
	}
	if v, err := Negotiate([]string{"2.0", "1.0"}, []string{"1.0", "2.0"}); err != nil || v != "2.0" {
		t.Fatalf("newest common version: %q, %v", v, err)
	}
	if _, err := Negotiate([]string{"1.0"}, []string{"0.1"}); CodeOf(err) != CodeIncompatibleVersion {
		t.Fatalf("no common version: %v", err)
	}
}
