package kernellane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkGuestOverwriteVsDD is make bench-overwrite's guest variant: the
// overwrite step against `dd oflag=direct` on the same emulated NVMe
// namespace (4 KiB blocks) of the real-kernel guest. The guest runs
// plugins/builtin's BenchmarkOverwriteVsDD on the block device; its lines,
// ratio included, are printed here.
func BenchmarkGuestOverwriteVsDD(b *testing.B) {
	dir := assets(b)
	disk := []Disk{{Addr: "0000:00:10.0", Serial: "SCOURBENCH", BlockSize: 4096, SizesMiB: []int{256}}}
	for range b.N {
		res, err := Run(context.Background(), Boot{Assets: dir, Dir: b.TempDir(), Disks: disk, Cmdline: []string{"scour.run=bench"}, Timeout: 8 * time.Minute})
		if err != nil {
			b.Fatalf("%v\n%s", err, res.Report)
		}
		if res.ExitCode != 0 {
			b.Fatalf("guest benchmark exited %d:\n%s", res.ExitCode, res.Report)
		}
		for _, l := range strings.Split(res.Report, "\n") {
			if strings.HasPrefix(l, "overwrite-bench:") {
				fmt.Println("guest " + l)
			}
		}
		fmt.Printf("guest overwrite-bench: accel %s, QEMU NVMe namespace 256 MiB, 4 KiB logical blocks, guest wall %.1fs\n", res.Accel, res.Wall.Seconds())
	}
}
