package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

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

// An error cut to the byte limit never ends in half a character: the
// record is JSON text, and a broken UTF-8 sequence would be replaced or
// refused when it is stored or verified.
func TestTriesCutErrorsOnACharacterBoundary(t *testing.T) {
	var tr tries
	tr.failed(errors.New("x" + strings.Repeat("é", maxErrorBytes))) // 1 + 2 bytes each: the limit falls inside one
	got := tr.details(2)["earlier_errors"].([]string)[0]
	if !utf8.ValidString(got) || !strings.HasSuffix(got, " [truncated]") || len(got) > maxErrorBytes+len(" [truncated]") {
		t.Errorf("cut error: valid UTF-8 %v, %d bytes, %q...", utf8.ValidString(got), len(got), got[:20])
	}
}
