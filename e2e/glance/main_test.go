// Package glance holds the end-to-end tests of images fetched from a real
// Glance (Debian's glance-api in a container, e2e/harness): uploads as an
// operator makes them, tampering behind Glance's back, faults in between.
package glance

import (
	"testing"

	"github.com/scour-project/scour/e2e/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
