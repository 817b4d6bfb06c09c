package builtin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/scour-project/scour/hardware"
)

// BenchmarkOverwriteVsDD compares the overwrite step's throughput with
// `dd if=/dev/zero of=FILE bs=4M oflag=direct conv=fsync` on the same file
// system, same file size, alternating rounds and comparing medians so a
// noisy neighbour hits both alike. It prints the ratio (target >= 0.9).
// Run it with `make bench-overwrite`; SCOUR_BENCH_DIR picks the directory
// (default /var/tmp), SCOUR_BENCH_MIB the size (default 512);
// SCOUR_BENCH_DEVICE a block device to write instead (the kernel lane's
// guest variant, kernellane.BenchmarkGuestOverwriteVsDD).
func BenchmarkOverwriteVsDD(b *testing.B) {
	if _, err := exec.LookPath("dd"); err != nil {
		b.Skip("dd not installed")
	}
	dir := os.Getenv("SCOUR_BENCH_DIR")
	if dir == "" {
		dir = "/var/tmp"
	}
	mib := int64(512)
	if s := os.Getenv("SCOUR_BENCH_MIB"); s != "" {
		mib, _ = strconv.ParseInt(s, 10, 64)
	}
	var path string
	if dev := os.Getenv("SCOUR_BENCH_DEVICE"); dev != "" {
		// A block device (the kernel lane's emulated NVMe namespace):
		// both write over it, at most its size.
		path, dir = dev, dev
		f, err := os.Open(dev)
		if err != nil {
			b.Fatal(err)
		}
		end, err := f.Seek(0, 2)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		mib = min(mib, end>>20) &^ 3
	} else {
		tmp, err := os.MkdirTemp(dir, "scour-bench-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		path = filepath.Join(tmp, "media")
		// Preallocate so both write over existing blocks, like a real device.
		if out, err := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=4M", fmt.Sprint("count=", mib/4), "conv=fsync").CombinedOutput(); err != nil {
			b.Fatalf("preallocating: %v %s", err, out)
		}
	}
	size := mib << 20
	ddFlags := []string{"oflag=direct"}
	if f, direct, err := openMedia(path, os.O_WRONLY); err != nil {
		b.Fatal(err)
	} else {
		f.Close()
		if !direct {
			ddFlags = nil
			fmt.Printf("overwrite-bench: %s refuses O_DIRECT; both sides write buffered (+fsync)\n", dir)
		}
	}
	o := MediaOptions{BlockSize: 4 << 20, QueueDepth: 2}
	var ours, ours1, dds []float64
	direct := false
	const rounds = 3
	b.ResetTimer()
	for range b.N {
		for range rounds {
			start := time.Now()
			args := append([]string{"if=/dev/zero", "of=" + path, "bs=4M", fmt.Sprint("count=", mib/4), "conv=fsync,notrunc"}, ddFlags...)
			if out, err := exec.Command("dd", args...).CombinedOutput(); err != nil {
				b.Fatalf("dd: %v %s", err, out)
			}
			dds = append(dds, float64(size)/(1<<20)/time.Since(start).Seconds())
			st, err := Overwrite(context.Background(), hardware.Media{Path: path, Size: size}, o, nil)
			if err != nil {
				b.Fatal(err)
			}
			ours, direct = append(ours, st.MiBps()), st.Direct
			o1 := o
			o1.QueueDepth = 1
			if st, err = Overwrite(context.Background(), hardware.Media{Path: path, Size: size}, o1, nil); err != nil {
				b.Fatal(err)
			}
			ours1 = append(ours1, st.MiBps())
		}
	}
	b.StopTimer()
	med := func(x []float64) float64 { s := slices.Clone(x); slices.Sort(s); return s[len(s)/2] }
	ratio := med(ours) / med(dds)
	b.ReportMetric(med(ours), "overwrite-MiB/s")
	b.ReportMetric(med(dds), "dd-MiB/s")
	b.ReportMetric(ratio, "ratio")
	fmt.Printf("overwrite-bench: %d MiB on %s, medians of %d rounds: dd bs=4M %v conv=fsync %.0f MiB/s; overwrite (O_DIRECT %v, 4 MiB) queue_depth 1: %.0f MiB/s (ratio %.2f), queue_depth 2 (default): %.0f MiB/s\n",
		mib, dir, len(ours), ddFlags, med(dds), direct, med(ours1), med(ours1)/med(dds), med(ours))
	fmt.Printf("overwrite-bench: ratio overwrite/dd = %.2f (target >= 0.90)\n", ratio)
}
