package broker

import (
	"io"
	"log/slog"
	"testing"
)

func testLogger(*testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
