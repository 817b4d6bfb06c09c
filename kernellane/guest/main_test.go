//go:build kernelguest

package guest

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("SCOUR_KERNEL_GUEST") != "1" {
		fmt.Fprintln(os.Stderr, "kernellane/guest: these tests rebind and erase the machine's NVMe devices; they run only in the lane's guest (make test-kernel)")
		os.Exit(2)
	}
	os.Exit(m.Run())
}
