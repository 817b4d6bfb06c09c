package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/e2e/harness"
)

// demoNarrateEnv makes TestDemo tell a human what happens (`make demo`);
// without it the test is as quiet as any other.
const demoNarrateEnv = "SCOUR_DEMO_NARRATE"

// narrator prints the demo's story to stdout when SCOUR_DEMO_NARRATE is
// set, and to the test log otherwise (shown only on failure or -v).
type narrator struct {
	t     *testing.T
	on    bool
	start time.Time
}

func newNarrator(t *testing.T) *narrator {
	return &narrator{t: t, on: os.Getenv(demoNarrateEnv) != "", start: time.Now()}
}

func (n *narrator) say(format string, args ...any) {
	n.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if !n.on {
		n.t.Log(msg)
		return
	}
	fmt.Printf("[%5.1fs] %s\n", time.Since(n.start).Seconds(), msg)
}

// block prints a multi-line block (a command's output) indented.
func (n *narrator) block(title, text string) {
	n.t.Helper()
	text = strings.TrimRight(text, "\n")
	if !n.on {
		n.t.Logf("%s\n%s", title, text)
		return
	}
	fmt.Printf("\n----- %s -----\n%s\n-----\n\n", title, text)
}

// scourctl runs the scourctl built for these tests, as an operator would.
func scourctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(bins, "scourctl"), args...).CombinedOutput()
	return string(out), err
}

// progressMetric matches scour_pipeline_step_progress_ratio samples.
var progressMetric = regexp.MustCompile(`^scour_pipeline_step_progress_ratio\{([^}]*)\} (\S+)$`)

// stepProgress reads the pipeline's progress gauge for addr from scourd's
// /metrics: the step running on the device and its progress (0..1), or ""
// when no step reports progress now.
func (h *Host) stepProgress(addr string) (step string, ratio float64) {
	resp, err := http.Get("http://" + h.http + "/metrics")
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		m := progressMetric.FindStringSubmatch(line)
		if m == nil || !strings.Contains(m[1], `device="`+addr+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(m[1], ",") {
			if s, ok := strings.CutPrefix(l, `step="`); ok {
				step = strings.TrimSuffix(s, `"`)
			}
		}
		return step, v
	}
	return "", 0
}

// demoLogMsgs are the scourd log messages the demo shows as they appear.
var demoLogMsgs = []string{
	`msg="claim recorded"`, `msg="claim released"`, `msg="cleaning run started"`,
	`msg="step started"`, `msg="step succeeded"`, `msg="step not run"`, `msg="step failed"`,
	`msg="cleaning run finished"`, `msg="device cleaned and returned to the pool"`,
}

// demoLogNoise are log fields the demo leaves out for readability.
var demoLogNoise = regexp.MustCompile(` (host|message_id|request_id|rp|run|profile|pipeline|event_type|kind|component|resize_target|claim|device|previous_instance|destructive)=("[^"]*"|\S+)| \w+=""`)

// logFollower yields scourd log lines (the interesting ones) not shown yet.
type logFollower struct {
	h    *Host
	seen int
}

func (f *logFollower) next() []string {
	all := f.h.Logs()
	if len(all) <= f.seen {
		return nil
	}
	chunk := all[f.seen:]
	// Only whole lines; the rest waits for the next call.
	i := strings.LastIndexByte(chunk, '\n')
	if i < 0 {
		return nil
	}
	chunk = chunk[:i+1]
	f.seen += len(chunk)
	var out []string
	for _, line := range strings.Split(strings.TrimRight(chunk, "\n"), "\n") {
		for _, m := range demoLogMsgs {
			if j := strings.Index(line, m); j >= 0 {
				out = append(out, demoLogNoise.ReplaceAllString(line[j:], ""))
				break
			}
		}
	}
	return out
}

// TestDemo is `make demo`: one simulated compute host with four
// one-time-use devices (three NVMe, one GPU) and slow wipes, an instance
// booted with one NVMe device and deleted; the device goes dirty ->
// cleaning (with progress) -> available, and its cleaning record is
// printed. It asserts what it shows, so it is also a regular e2e test.
func TestDemo(t *testing.T) {
	n := newNarrator(t)
	const (
		nvme0 = "0000:81:00.0"
		nvme1 = "0000:82:00.0"
		nvme2 = "0000:83:00.0"
		gpu0  = "0000:c1:00.0"
	)
	n.say("starting RabbitMQ and OpenStack Placement (containers, shared by the e2e tests)")
	c := NewCloud(t)
	n.say("broker %s, Placement %s", c.Bus.URL(), c.P.URL())

	n.say("seeding a compute node with four one-time-use devices (3 NVMe, 1 GPU) and starting scourd on simulated hardware")
	// Only notifications drive the story; the reconciler would reach the
	// same end on its own, but later.
	h := c.AddHost(t, []SimDevice{{Address: nvme0}, {Address: nvme1}, {Address: nvme2}, {Address: gpu0, Kind: "gpu"}},
		WithSlowWipes(300*time.Millisecond), WithReconcileInterval(time.Hour))
	n.say("scourd for host %s is consuming (config %s)", h.Name, h.config)
	if out, err := scourctl(t, "placement", "scan", "--config", h.config); err == nil {
		n.block("scourctl placement scan (before boot)", out)
	} else {
		n.say("(scourctl placement scan unavailable: %v)", err)
	}

	all := []string{nvme0, nvme1, nvme2, gpu0}
	for _, a := range all {
		if r := c.Reserved(t, h.Device(a)); r != 0 {
			t.Fatalf("device %s starts with reserved=%d, want 0 (available)", a, r)
		}
	}
	for _, a := range []string{nvme0, nvme1, nvme2} {
		if h.MediaZeroed(t, a) {
			t.Fatalf("the simulated media of %s starts zeroed: a wipe could not be told from nothing", a)
		}
	}

	inst := harness.NewUUID()
	n.say("nova-compute boots instance %s with NVMe %s: allocation, burn (reserved=total), instance.create.end", inst, nvme0)
	c.Boot(t, h, inst, harness.Versioned, nvme0)
	d := h.Device(nvme0)
	n.say("Placement: %s reserved=%d/1, allocated to the instance (burned-in-use)", nvme0, c.Reserved(t, d))

	logs := &logFollower{h: h}
	// Wait for the claim before the delete, so the story reads in order.
	Eventually(t, 30*time.Second, "claim recorded", func() (bool, string) {
		return strings.Contains(h.Logs(), `msg="claim recorded"`), tail(h.Logs(), 20)
	})
	for _, l := range logs.next() {
		n.say("  scourd: %s", l)
	}

	n.say("its media hold the tenant's data; nova deletes the instance: allocations removed, instance.delete.end")
	c.Delete(t, h, inst, harness.Versioned)
	n.say("Placement: %s reserved=%d/1, no allocations: DIRTY (nobody can be scheduled on it)", nvme0, c.Reserved(t, d))

	var (
		sawProgress bool
		lastShown   = -1.0
		lastStep    string
		deadline    = time.Now().Add(90 * time.Second)
	)
	for {
		for _, l := range logs.next() {
			n.say("  scourd: %s", l)
		}
		if step, p := h.stepProgress(nvme0); step != "" {
			if step != lastStep || p-lastShown >= 0.2 || (p == 1 && lastShown != 1) {
				n.say("CLEANING %s: step %-8s %3.0f%%  (scour_pipeline_step_progress_ratio)", nvme0, step, p*100)
				lastStep, lastShown = step, p
			}
			if p > 0 && p < 1 {
				sawProgress = true
			}
		}
		if r := c.Reserved(t, d); r == 0 {
			for _, l := range logs.next() {
				n.say("  scourd: %s", l)
			}
			n.say("Placement: %s reserved=0/1: AVAILABLE again", nvme0)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("device %s not returned to the pool within 90s; scourd log tail:\n%s", nvme0, tail(h.Logs(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sawProgress {
		t.Errorf("never saw the cleaning of %s in progress on /metrics (scour_pipeline_step_progress_ratio strictly between 0 and 1) although its wipes were slowed to ~3s", nvme0)
	}

	// What it shows, it asserts.
	if !h.MediaZeroed(t, nvme0) {
		t.Errorf("device %s returned to the pool but its media was not wiped", nvme0)
	} else {
		n.say("media of %s: every byte is zero", nvme0)
	}
	recs := h.Records(t, nvme0)
	if len(recs) != 1 {
		t.Fatalf("want 1 cleaning record for %s, got %d: %v", nvme0, len(recs), recs)
	}
	rec := recs[0]
	if res, _ := rec["result"].(map[string]any); res["state"] != "returned" {
		t.Errorf("record result = %v, want state returned", rec["result"])
	}
	if prev, _ := rec["previous_tenant"].(map[string]any); prev["instance_uuid"] != inst {
		t.Errorf("record previous tenant = %v, want instance %s", rec["previous_tenant"], inst)
	}
	method, _ := rec["method"].(map[string]any)
	steps, _ := method["steps"].([]any)
	outcomes := map[string]string{}
	for _, s := range steps {
		s := s.(map[string]any)
		outcomes[fmt.Sprint(s["name"])] = fmt.Sprint(s["outcome"])
	}
	for _, want := range []string{"wear", "sanitize", "verify"} {
		if outcomes[want] != "ok" {
			t.Errorf("record step %s outcome = %q, want ok (all: %v)", want, outcomes[want], outcomes)
		}
	}
	for _, a := range []string{nvme1, nvme2, gpu0} {
		if r := c.Reserved(t, h.Device(a)); r != 0 {
			t.Errorf("untouched device %s has reserved=%d, want 0", a, r)
		}
		if recs := h.Records(t, a); recs != nil {
			t.Errorf("untouched device %s has cleaning records: %v", a, recs)
		}
	}
	for _, a := range []string{nvme1, nvme2} {
		if h.MediaZeroed(t, a) {
			t.Errorf("untouched device %s had its media wiped", a)
		}
	}
	n.say("the other three devices were not touched (reserved 0, no records, media intact)")

	out, err := scourctl(t, "records", "export", "--state-path", filepath.Join(h.Dir, "state"), "--device", nvme0)
	if err != nil {
		t.Fatalf("scourctl records export: %v\n%s", err, out)
	}
	n.block("scourctl records export --device "+nvme0+" (the certificate of sanitization)", out)
	demoRecordIsProof(t, n, h, nvme0, out)
	if out, err := scourctl(t, "placement", "scan", "--config", h.config); err == nil {
		n.block("scourctl placement scan (after)", out)
	}
	out, err = scourctl(t, "status", "--config", h.config)
	if err != nil {
		t.Fatalf("scourctl status: %v\n%s", err, out)
	}
	if !regexp.MustCompile(nvme0 + `\s+available\s+0/1\s+\S+\s+returned\s`).MatchString(out) {
		t.Errorf("scourctl status does not show %s available with a returned last run:\n%s", nvme0, out)
	}
	n.block("scourctl status (Placement state, last cleaning verdict, open run)", out)
	n.say("done: boot -> delete -> dirty -> cleaning -> available, with a stored record")
}

// The operator's side of a quarantine, through scourctl against the real
// Placement and scourd's own config file: scan shows the quarantined
// device, unquarantine refuses a device that is not quarantined, and
// after the cause is fixed unquarantine releases the device, which stays
// reserved until scourd has cleaned it again.
func TestScourctlPlacementUnquarantine(t *testing.T) {
	t.Parallel()
	const bad, good = "0000:81:00.0", "0000:82:00.0"
	c := NewCloud(t)
	h := c.AddHost(t, []SimDevice{{Address: bad}, {Address: good}})
	d := h.Device(bad)
	inst := harness.NewUUID()
	c.Boot(t, h, inst, harness.Versioned, bad)
	h.FaultFile(t, bad, "fail", "sanitize")
	c.Delete(t, h, inst, harness.Versioned)
	Eventually(t, 60*time.Second, "device quarantined", func() (bool, string) {
		return c.Quarantined(t, d), "no quarantine trait; log tail:\n" + tail(h.Logs(), 30)
	})

	out, err := scourctl(t, "placement", "scan", "--config", h.config)
	if err != nil {
		t.Fatalf("scourctl placement scan: %v\n%s", err, out)
	}
	row := func(out, addr string) []string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 7 && f[2] == addr {
				return f
			}
		}
		t.Fatalf("no row for %s in:\n%s", addr, out)
		return nil
	}
	if f := row(out, bad); f[1] != d.UUID || f[3] != "quarantined" || f[4] != "1/1" || f[5] != "-" || f[6] != "yes" {
		t.Errorf("scan row of the quarantined device = %v\n%s", f, out)
	}
	if f := row(out, good); f[3] != "available" || f[4] != "0/1" || f[6] != "no" {
		t.Errorf("scan row of the untouched device = %v\n%s", f, out)
	}

	out, err = scourctl(t, "status", "--config", h.config)
	if err != nil {
		t.Fatalf("scourctl status: %v\n%s", err, out)
	}
	if !strings.Contains(out, bad) || !regexp.MustCompile(bad+`\s+quarantined\s+1/1\s+\S+\s+quarantined\s`).MatchString(out) {
		t.Errorf("status does not show %s quarantined with a quarantined last run:\n%s", bad, out)
	}

	out, err = scourctl(t, "placement", "unquarantine", "--config", h.config, good)
	if err == nil || !strings.Contains(out, "is not quarantined") {
		t.Errorf("unquarantine of a device that is not quarantined: err %v, output:\n%s", err, out)
	}
	if c.Reserved(t, h.Device(good)) != 0 || c.Quarantined(t, h.Device(good)) {
		t.Error("the refused unquarantine changed the device")
	}

	// The operator fixes the cause, then releases the device.
	if err := os.Remove(filepath.Join(h.Dir, "sim", bad, "fail-sanitize")); err != nil {
		t.Fatal(err)
	}
	out, err = scourctl(t, "placement", "unquarantine", "--config", h.config, d.UUID)
	if err != nil || !strings.Contains(out, "still reserved") {
		t.Fatalf("scourctl placement unquarantine: %v\n%s", err, out)
	}
	// scourd is told at once over its admin socket, not at its next scan.
	if !strings.Contains(out, "scans now") || !strings.Contains(h.Logs(), "rescan asked on the admin socket") {
		t.Errorf("unquarantine did not ask scourd to scan now:\n%s", out)
	}
	if c.Quarantined(t, d) {
		t.Fatal("quarantine trait still present after unquarantine")
	}
	c.WaitAvailable(t, h, bad, 60*time.Second)
	if !h.MediaZeroed(t, bad) {
		t.Error("unquarantined device returned to the pool without its media wiped")
	}
	recs := h.Records(t, bad)
	if len(recs) < 3 {
		t.Fatalf("want the failed runs and the clean one, got %d records", len(recs))
	}
	if res, _ := recs[0]["result"].(map[string]any); res["state"] != "returned" {
		t.Errorf("newest record after unquarantine: %v, want returned", recs[0]["result"])
	}
}

// demoRecordIsProof checks what makes the demo's record a certificate: a
// filled verification, its signature and chain link; scourctl records
// verify passes on it and fails on the export with one byte changed.
func demoRecordIsProof(t *testing.T, n *narrator, h *Host, addr, exported string) {
	t.Helper()
	var rec claims.Record
	if err := json.Unmarshal([]byte(exported), &rec); err != nil {
		t.Fatalf("exported record: %v", err)
	}
	if len(rec.Verification) == 0 {
		t.Fatalf("record has no verification: %s", exported)
	}
	v := rec.Verification[0]
	if v.Result != "passed" || v.BytesRead <= 0 || v.Method == "" || v.Expected != "every byte 0x00" {
		t.Errorf("record verification = %+v; want passed, with bytes read, method and expected pattern", v)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(filepath.Join("..", "docs", "cleaning-record.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(exported))
	if err == nil {
		err = sch.Validate(inst)
	}
	if err != nil {
		t.Errorf("the demo's record does not match docs/cleaning-record.schema.json: %v", err)
	}
	z := rec.Sanitization
	if z.Category != "purge" || len(z.Techniques) == 0 || len(z.Tools) == 0 || rec.PerformedBy.Service != "scourd" ||
		rec.PerformedBy.ScourVersion == "" || rec.Device.Type != "nvme" || rec.Device.CapacityBytes <= 0 || rec.Device.Make == "" {
		t.Errorf("certificate fields: performed_by %+v, device %+v, sanitization %+v", rec.PerformedBy, rec.Device, z)
	}
	if rec.Signature == nil || rec.Chain == nil || rec.Chain.HostSeq < 1 || rec.Signature.KeyID == "" {
		t.Fatalf("record is not signed and chained: signature %+v, chain %+v", rec.Signature, rec.Chain)
	}
	n.say("record: verification %s (%s, %d bytes read, expected %s); record %d of host %s, signed by %s",
		v.Result, v.Method, v.BytesRead, v.Expected, rec.Chain.HostSeq, rec.Host, rec.Signature.KeyID)
	state := filepath.Join(h.Dir, "state")
	out, err := scourctl(t, "records", "verify", "--state-path", state, "--device", addr)
	if err != nil || !strings.Contains(out, "OK: ") {
		t.Fatalf("scourctl records verify --device %s: %v\n%s", addr, err, out)
	}
	n.block("scourctl records verify --device "+addr, out)
	file := filepath.Join(t.TempDir(), "record.json")
	if err := os.WriteFile(file, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := scourctl(t, "records", "verify", "--state-path", state, "--file", file, "--pubkey", filepath.Join(state, "record-signing.key.pub")); err != nil {
		t.Fatalf("verify of the exported file: %v\n%s", err, out)
	}
	html, err := scourctl(t, "records", "export", "--state-path", state, "--device", addr, "--format", "html")
	if err != nil {
		t.Fatalf("scourctl records export --format html: %v\n%s", err, html)
	}
	for _, want := range []string{"Certificate of sanitization", addr, rec.PreviousTenant.InstanceUUID, "RETURNED",
		"sanitize", v.Method, "PASSED", v.Expected, rec.Signature.KeyID, "PURGE", z.Techniques[0].Technique, fmt.Sprintf("number %d of host %s", rec.Chain.HostSeq, rec.Host)} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML certificate lacks %q", want)
		}
	}
	n.say("scourctl records export --format html: a one-page certificate (%d bytes)", len(html))
	changed := strings.Replace(exported, `"returned"`, `"returnee"`, 1)
	os.WriteFile(file, []byte(changed), 0o600)
	out, err = scourctl(t, "records", "verify", "--state-path", state, "--file", file)
	if err == nil || !strings.Contains(out, "changed after it was signed") {
		t.Errorf("verify of the export with one byte changed: %v\n%s; want it refused", err, out)
	}
}
