package kernellane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/e2e/harness"
)

// Guest addresses of the host's services: QEMU's user networking with
// restrict=on has no route out; these guestfwd rules are its only exits,
// each to a 127.0.0.1 port of this machine.
const (
	guestAMQP      = "10.0.2.100:5672"
	guestPlacement = "10.0.2.101:8778"
)

// TestScourdEndToEnd: scourd itself in the guest, on the real backend,
// against the e2e RabbitMQ and Placement containers on the host. Nova
// burns one emulated drive for an instance (tenant data on it); deleting
// the instance leads to a real Format NVM of the vfio-bound drive, read
// back verification, a stored record, and reserved back to 0. The
// neighbour drive is not touched.
func TestScourdEndToEnd(t *testing.T) {
	dir := assets(t)
	bus := harness.StartRabbitMQ(t).VHost(t)
	p := harness.StartPlacement(t)
	host := harness.UniqueName("kl")
	machine := Machine()[:2]
	used, neighbour := machine[0], machine[1]
	var seed []harness.Device
	for _, d := range machine {
		seed = append(seed, harness.Device{Address: d.Addr, VendorID: "1b36", ProductID: "0010", OneTimeUse: true})
	}
	node := p.SeedComputeNode(t, host, seed...)
	inst := harness.NewUUID()
	rp := node.Device(used.Addr)
	p.AllocateInstance(t, inst, "tenant-a", "user-a", node, rp)
	p.Burn(t, rp)

	work := t.TempDir()
	tenantData := bytes.Repeat([]byte("TENANT-A-DATA;"), 1<<16)
	for _, d := range machine {
		if err := sparse(ImagePath(work, d, 1), int64(d.SizesMiB[0])<<20); err != nil {
			t.Fatal(err)
		}
		writeAt(t, ImagePath(work, d, 1), tenantData, 1<<20)
	}

	amqp := forward(t, bus.URL())
	plc := forward(t, p.URL())
	extra := guestFiles(t, work, map[string]any{
		"host": host,
		"log":  map[string]any{"level": "info", "format": "json"},
		"http": map[string]any{"address": "127.0.0.1:9464"},
		"bus": map[string]any{"url": "amqp://guest:guest@" + guestAMQP + amqp.Path,
			"retry": map[string]any{"attempts": 3, "initial": "100ms", "max": "1s"}, "shutdown_timeout": "5s"},
		"placement": map[string]any{"endpoint": "http://" + guestPlacement + plc.Path, "token": p.Token(),
			"retry": map[string]any{"attempts": 5, "base": "50ms", "max": "500ms", "budget": "10s"}},
		"claims":   map[string]any{"driver": "sqlite", "state_path": "/var/lib/scour/state"},
		"admin":    map[string]any{"socket": "/run/scourd.sock"},
		"hardware": map[string]any{"backend": "real"},
		"pipelines": map[string]any{"plugin_dirs": []string{"/usr/libexec/scour/plugins"}, "profiles": []map[string]any{{
			"name": "nvme", "match": map[string]any{"kinds": []string{"nvme"}},
			"pipeline": map[string]any{"name": "nvme-format", "version": 1, "steps": []map[string]any{
				{"name": "wear", "type": "nvme-wear-check", "driver": "nvme"},
				{"name": "format", "type": "nvme-format", "driver": "nvme", "args": map[string]any{"crypto": false}},
				{"name": "verify", "type": "verify", "driver": "nvme", "args": map[string]any{"mode": "all"}},
			}},
		}}},
		"lifecycle": map[string]any{"reconcile_interval": "1h", "scan_debounce": "100ms", "follow_up_delay": "1s",
			"backoff_base": "1s", "backoff_max": "2s", "stuck_after": "5m"},
	}, used.Addr)

	g, err := Start(context.Background(), Boot{Assets: dir, Dir: work, Disks: machine, Extra: extra, Timeout: 6 * time.Minute,
		Cmdline: []string{"scour.run=scourd"},
		QEMU: []string{"-netdev", fmt.Sprintf("user,id=net0,restrict=on,guestfwd=tcp:%s-cmd:socat - TCP:%s,guestfwd=tcp:%s-cmd:socat - TCP:%s",
			guestAMQP, amqp.Host, guestPlacement, plc.Host),
			"-device", "virtio-net-pci,netdev=net0"}}, Accel(dir, work))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Kill()
	waitFor(t, g, 3*time.Minute, `"msg":"consuming"`)

	p.DeleteAllocations(t, inst)
	bus.PublishNotification(t, harness.Event{Type: "instance.delete.end", InstanceUUID: inst, Host: host, Node: host}, harness.Versioned)
	deadline := time.Now().Add(3 * time.Minute)
	for p.Inventory(t, rp.UUID, rp.ResourceClass).Reserved != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("reserved still %d after 3 minutes; guest report:\n%s", p.Inventory(t, rp.UUID, rp.ResourceClass).Reserved, tail(g.ReportSoFar(), 6000))
		}
		time.Sleep(time.Second)
	}
	res, err := g.Wait()
	if err != nil {
		t.Fatalf("%v\nreport:\n%s", err, tail(res.Report, 6000))
	}
	t.Logf("accel %s, devices bound %.1fs after boot, guest wall %.1fs", res.Accel, res.Booted.Seconds(), res.Wall.Seconds())
	if res.ExitCode != 0 {
		t.Fatalf("guest run.sh exited %d:\n%s", res.ExitCode, tail(res.Report, 6000))
	}
	checkRecord(t, res.Record, used)
	if img, _ := os.ReadFile(ImagePath(work, used, 1)); len(bytes.Trim(img, "\x00")) != 0 {
		t.Error("device returned to the pool, but its namespace still holds non-zero data")
	}
	if img, _ := os.ReadFile(ImagePath(work, neighbour, 1)); !bytes.Contains(img, tenantData) {
		t.Error("the neighbour drive's data was touched")
	}
	if r := p.Inventory(t, node.Device(neighbour.Addr).UUID, rp.ResourceClass).Reserved; r != 0 {
		t.Errorf("neighbour reserved %d, want 0 (never burned)", r)
	}
}

// checkRecord: the exported record of the run names the drive as QEMU
// reports it, and its format and verify steps succeeded.
func checkRecord(t *testing.T, record string, d Disk) {
	t.Helper()
	_, body, ok := strings.Cut(record, "SCOUR-RECORD-BEGIN")
	body, _, ok2 := strings.Cut(body, "SCOUR-RECORD-END")
	if !ok || !ok2 {
		t.Fatalf("no record from the guest:\n%s", record)
	}
	var recs []map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &recs); err != nil {
		var one map[string]any
		if err2 := json.Unmarshal([]byte(strings.TrimSpace(body)), &one); err2 != nil {
			t.Fatalf("record is not JSON: %v\n%s", err, body)
		}
		recs = []map[string]any{one}
	}
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(recs), body)
	}
	r := recs[0]
	if dev, _ := r["device"].(map[string]any); dev["pci_address"] != d.Addr || dev["serial"] != d.Serial {
		t.Errorf("record device %v, want %s with serial %s (as QEMU reports it, though the drive is bound to vfio-pci)", dev, d.Addr, d.Serial)
	}
	if res, _ := r["result"].(map[string]any); res["state"] != "returned" {
		t.Errorf("record result %v, want returned", res)
	}
	steps := map[string]string{}
	method, _ := r["method"].(map[string]any)
	list, _ := method["steps"].([]any)
	for _, s := range list {
		m, _ := s.(map[string]any)
		name, _ := m["name"].(string)
		steps[name] = fmt.Sprint(m["outcome"])
	}
	if steps["format"] != "ok" || steps["verify"] != "ok" {
		t.Errorf("record steps %v, want format and verify ok\n%s", steps, body)
	}
}

// forward parses a 127.0.0.1 service URL a guestfwd rule will reach.
func forward(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || !strings.HasPrefix(u.Host, "127.0.0.1:") && !strings.HasPrefix(u.Host, "localhost:") {
		t.Fatalf("%s: the guest reaches only 127.0.0.1 ports of this machine (%v)", raw, err)
	}
	u.Host = strings.Replace(u.Host, "localhost:", "127.0.0.1:", 1)
	return u
}

// guestFiles packs scourd's config and the guest's run.sh into a cpio
// archive appended to the initramfs. run.sh starts scourd, waits until the
// run of addr is returned (record ended), writes the record to ttyS2 and
// stops scourd.
func guestFiles(t *testing.T, work string, cfg map[string]any, addr string) string {
	t.Helper()
	root := filepath.Join(work, "extra")
	if err := os.MkdirAll(filepath.Join(root, "scour/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("scour/etc/scour.yaml", string(b), 0o600)
	write("scour/etc/run.sh", `#!/bin/sh
/scour/scourd --config /scour/etc/scour.yaml &
pid=$!
list() { /scour/scourctl records list --state-path /var/lib/scour/state --device `+addr+` --state returned -o json; }
i=0
until list 2>/dev/null | grep -q '{'; do
	i=$((i+1))
	[ $i -gt 240 ] && { echo "run.sh: no returned record after 240 s"; list; kill $pid; exit 1; }
	kill -0 $pid || { echo "run.sh: scourd exited"; exit 1; }
	sleep 1
done
{ echo SCOUR-RECORD-BEGIN; /scour/scourctl records export --all --state-path /var/lib/scour/state --device `+addr+`; echo SCOUR-RECORD-END; } >/dev/ttyS2 2>&1
kill -TERM $pid
wait $pid
`, 0o755)
	out := filepath.Join(work, "extra.cpio")
	cmd := exec.Command("sh", "-c", "find scour | cpio -o -H newc --quiet > "+out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v %s", err, b)
	}
	return out
}

func waitFor(t *testing.T, g *Guest, timeout time.Duration, s string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(g.ReportSoFar(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("guest did not log %s within %s:\n%s", s, timeout, tail(g.ReportSoFar(), 6000))
		}
		if g.Exited() {
			t.Fatalf("guest exited before logging %s:\n%s", s, tail(g.ReportSoFar(), 6000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
