package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/scour-project/scour/plugins"
)

// TestTriesKeepNewestEarlierErrorsBounded: the record keeps the newest
// three earlier errors, each cut to maxErrorBytes, and counts the rest.
func TestTriesKeepNewestEarlierErrorsBounded(t *testing.T) {
	var tr tries
	for i := 1; i <= 5; i++ {
		tr.failed(plugins.Errorf(plugins.CodeTryAgainLater, "try %d", i))
	}
	tr.failed(errors.New(strings.Repeat("x", 2*maxErrorBytes)))
	got := tr.details(7)
	want := map[string]any{"count": 7, "earlier_errors_omitted": 3, "earlier_errors": []string{
		"try 4 (code 11)", "try 5 (code 11)", fmt.Sprint(plugins.AsError(errors.New(strings.Repeat("x", 2*maxErrorBytes))).Error()[:maxErrorBytes], " [truncated]")}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tries (-want +got):\n%s", diff)
	}
}
