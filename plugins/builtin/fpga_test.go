package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/hardware/sim"
	"github.com/scour-project/scour/plugins"
)

const fpgaAddr = hardware.Address("0000:5e:00.0")

// golden writes a simulated bitstream carrying id and returns the
// image reference for args.image, declaring declared.
func golden(t *testing.T, id, declared string) map[string]any {
	t.Helper()
	p := filepath.Join(t.TempDir(), "golden.gbs")
	b := []byte(sim.BitstreamHeader + id + "\nbits")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return map[string]any{"file": p, "sha256": hex.EncodeToString(sum[:]), "bitstream_id": declared, "name": "n3000-golden"}
}

func fpgaSim(t *testing.T) *sim.Simulator {
	return newSim(t, hardware.SimDevice{Address: string(fpgaAddr), Kind: hardware.KindFPGA, FPGARegions: 2, BitstreamID: "0xtenant"})
}

// fpgaStep runs a step on the simulated FPGA with a fake plugin runner.
func fpgaStep(t *testing.T, be hardware.Backend, name string, args map[string]any, tool func(ctx context.Context, path string, args map[string]any) (*plugins.Result, error), earlier ...map[string]any) (*plugins.Result, error) {
	t.Helper()
	return fpgaAttempt(t, be, name, args, tool, false, earlier...)
}

// fpgaAttempt is fpgaStep for an attempt after an earlier one of the
// step ran (retried: Target.Retried) or not.
func fpgaAttempt(t *testing.T, be hardware.Backend, name string, args map[string]any, tool func(ctx context.Context, path string, args map[string]any) (*plugins.Result, error), retried bool, earlier ...map[string]any) (*plugins.Result, error) {
	t.Helper()
	ctx := context.Background()
	dev, err := be.Discover(ctx, fpgaAddr)
	if err != nil {
		t.Fatal(err)
	}
	tg := &Target{Device: dev, Step: name, Args: args, Earlier: earlier, Retried: retried}
	if tool != nil {
		tg.RunPlugin = func(ctx context.Context, path string, args map[string]any, _ func(float64)) (*plugins.Result, error) {
			return tool(ctx, path, args)
		}
	}
	spec, _ := Lookup(name)
	if err := spec.CheckArgs(args); err != nil {
		t.Fatalf("args: %v", err)
	}
	return spec.Run(ctx, be, tg)
}

func loaded(t *testing.T, s *sim.Simulator, region string) string {
	t.Helper()
	id, err := s.FPGALoadedID(context.Background(), fpgaAddr, region)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestFPGAProgramPutsGoldenIntoEveryRegionAndReadsBack(t *testing.T) {
	s := fpgaSim(t)
	res, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": golden(t, "0xgolden", "0xGOLDEN")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"region0", "region1"} {
		if id := loaded(t, s, r); id != "0xgolden" {
			t.Errorf("%s holds %q after fpga-program", r, id)
		}
	}
	img := res.Details[ImageKey].(map[string]any)
	if img["name"] != "n3000-golden" || img["hash_algo"] != "sha256" || img["size"] != int64(len(sim.BitstreamHeader)+len("0xgolden\nbits")) {
		t.Errorf("image in details: %v", img)
	}
	rb := res.Details[ReadbackKey].(map[string]any)
	if rb["result"] != "passed" || rb["expected"] != "0xGOLDEN" || len(rb["regions"].([]regionResult)) != 2 {
		t.Errorf("readback in details: %v", rb)
	}
	// What fpga-readback finds in the stored (JSON) details of the step.
	stored := asStored(t, res.Details)
	if _, err := fpgaStep(t, s, "fpga-readback", nil, nil, stored); err != nil {
		t.Errorf("fpga-readback after fpga-program: %v", err)
	}
	// A tenant's bitstream loaded behind the run's back fails the read-back.
	if err := s.ProgramFPGA(context.Background(), fpgaAddr, "region1", hardware.FPGAImage{Path: golden(t, "0xtenant2", "")["file"].(string)}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = fpgaStep(t, s, "fpga-readback", nil, nil, stored)
	if plugins.CodeOf(err) != plugins.CodePermanent || !strings.Contains(err.Error(), `region "region1" reports "0xtenant2"`) {
		t.Errorf("fpga-readback with region1 changed: %v, want permanent naming region1", err)
	}
	if _, err := fpgaStep(t, s, "fpga-readback", nil, nil); plugins.CodeOf(err) != plugins.CodeInvalidConfig {
		t.Errorf("fpga-readback without an earlier fpga-program: %v, want invalid config", err)
	}
}

// asStored is details as the claims store gives them back (JSON).
func asStored(t *testing.T, details map[string]any) map[string]any {
	t.Helper()
	var stored map[string]any
	b, _ := json.Marshal(details)
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	return stored
}

// A read-back that does not pass is code 12 (quarantine) and a failed
// verification in the step's details, so that the engine ends the run
// even when the step is optional (found in review: the mismatch, stored
// only under readback, let an optional step's run go on to clean).
func TestFPGAProgramReadbackDiffersQuarantines(t *testing.T) {
	s := fpgaSim(t)
	// The image declares 0xgolden but carries another bitstream.
	_, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": golden(t, "0xwrong", "0xgolden")}, nil)
	var pe *plugins.Error
	if !errors.As(err, &pe) || pe.Code != plugins.CodePermanent {
		t.Fatalf("err %v, want permanent (quarantine)", err)
	}
	rb, _ := pe.Details[ReadbackKey].(map[string]any)
	if rb["result"] != "failed" || pe.Details[ImageKey] == nil || !strings.Contains(pe.Msg, `reports "0xwrong"`) {
		t.Errorf("details %v, msg %q: want the failed read-back, the image and the id reported", pe.Details, pe.Msg)
	}
	v, _ := pe.Details[plugins.VerificationKey].(map[string]any)
	if v["result"] != plugins.VerifyFailed || !strings.Contains(fmt.Sprint(v["mismatch"]), `reports "0xwrong"`) {
		t.Errorf("verification %v, want failed naming the id read", v)
	}
}

func TestFPGAProgramRefusesImageThatDoesNotMatchItsHash(t *testing.T) {
	s := fpgaSim(t)
	ref := golden(t, "0xgolden", "0xgolden")
	ref["sha256"] = strings.Repeat("0", 64)
	_, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": ref}, nil)
	if plugins.CodeOf(err) != plugins.CodeInvalidConfig || !strings.Contains(err.Error(), "refusing to program") {
		t.Errorf("err %v, want invalid config refusing to program", err)
	}
	if id := loaded(t, s, "region0"); id != "0xtenant" {
		t.Errorf("region0 holds %q: a mismatching image was programmed", id)
	}
	ref = golden(t, "0xgolden", "0xgolden")
	delete(ref, "bitstream_id")
	if _, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": ref}, nil); plugins.CodeOf(err) != plugins.CodeInvalidConfig || loaded(t, s, "region0") != "0xtenant" {
		t.Errorf("an image declaring no id: %v, want invalid config and nothing programmed", err)
	}
}

// hideProgrammer is a backend that cannot program or read back FPGAs
// (the real one on a card sysfs says nothing about): only the tool can.
type hideProgrammer struct{ hardware.Backend }

func TestFPGAProgrammerTool(t *testing.T) {
	const tool = "/usr/lib/scour/plugins/fpga-xrt"
	ok := func(id string) func(context.Context, string, map[string]any) (*plugins.Result, error) {
		return func(_ context.Context, path string, args map[string]any) (*plugins.Result, error) {
			if path != tool || args["action"] != "program" || args["bitstream_id"] != nil || args["image_file"] == "" { // never told the id it should report
				return nil, plugins.Errorf(plugins.CodeInvalidRequest, "unexpected call %s %v", path, args)
			}
			return &plugins.Result{Status: plugins.StatusOK, Details: map[string]any{"readback_id": id}, SHA256: "abc"}, nil
		}
	}
	args := func(t *testing.T) map[string]any {
		return map[string]any{"image": golden(t, "0xgolden", "0xgolden"), "programmer": tool, "timeout": "100ms"}
	}
	t.Run("tool reads back the id", func(t *testing.T) {
		res, err := fpgaStep(t, hideProgrammer{fpgaSim(t)}, "fpga-program", args(t), ok("0xgolden"))
		if err != nil {
			t.Fatal(err)
		}
		rs := res.Details[ReadbackKey].(map[string]any)["regions"].([]regionResult)
		if len(rs) != 2 || rs[0].Source != "tool" || rs[0].Result != "passed" {
			t.Errorf("read-back %v, want both regions passed by the tool's id", rs)
		}
	})
	t.Run("tool says ok but the id differs", func(t *testing.T) {
		_, err := fpgaStep(t, hideProgrammer{fpgaSim(t)}, "fpga-program", args(t), ok("0xother"))
		if plugins.CodeOf(err) != plugins.CodePermanent || !strings.Contains(err.Error(), `"0xother" (tool)`) {
			t.Errorf("err %v, want permanent naming the tool's id", err)
		}
	})
	t.Run("tool says ok but sysfs shows the tenant's bitstream", func(t *testing.T) {
		s := fpgaSim(t) // reads back itself: the tool's word does not count
		_, err := fpgaStep(t, s, "fpga-program", args(t), ok("0xgolden"))
		if plugins.CodeOf(err) != plugins.CodePermanent || !strings.Contains(err.Error(), `"0xtenant" (sysfs)`) {
			t.Errorf("err %v, want permanent naming the id sysfs reports", err)
		}
	})
	t.Run("tool reports no id and sysfs has none", func(t *testing.T) {
		_, err := fpgaStep(t, hideProgrammer{fpgaSim(t)}, "fpga-program", args(t), func(context.Context, string, map[string]any) (*plugins.Result, error) {
			return plugins.OK(nil), nil
		})
		if plugins.CodeOf(err) != plugins.CodePermanent || !strings.Contains(err.Error(), "neither sysfs nor the tool") {
			t.Errorf("err %v, want permanent: nothing read back", err)
		}
	})
	t.Run("tool exits non-zero", func(t *testing.T) {
		_, err := fpgaStep(t, fpgaSim(t), "fpga-program", args(t), func(context.Context, string, map[string]any) (*plugins.Result, error) {
			return nil, &plugins.Error{Code: 101, Msg: "xbmgmt program exited 1", Stderr: "ERROR: Failed to flash base: device busy"}
		})
		var pe *plugins.Error
		if !errors.As(err, &pe) || pe.Code != plugins.CodePermanent || !strings.Contains(pe.Msg, "xbmgmt program exited 1") ||
			pe.Details["tool_stderr"] != "ERROR: Failed to flash base: device busy" || pe.Stderr == "" {
			t.Errorf("err %#v, want permanent with the tool's words and stderr", err)
		}
	})
	t.Run("tool hangs", func(t *testing.T) {
		_, err := fpgaStep(t, fpgaSim(t), "fpga-program", args(t), func(ctx context.Context, _ string, _ map[string]any) (*plugins.Result, error) {
			<-ctx.Done() // as the runner: the process group is killed at the deadline
			return nil, &plugins.Error{Code: plugins.CodeTimeout, Msg: "plugin fpga-xrt CLEAN: ran past its deadline; its process group was killed", Stderr: "Programming... 40%"}
		})
		var pe *plugins.Error
		if !errors.As(err, &pe) || pe.Code != plugins.CodePermanent || !strings.Contains(pe.Msg, "hung") || pe.Details["tool_stderr"] != "Programming... 40%" {
			t.Errorf("err %#v, want permanent (quarantine) saying it hung, with the tool's output", err)
		}
	})
}

// unsupportedFrom is a simulated FPGA whose backend programs the first
// region and answers unsupported from the second on.
type unsupportedFrom struct {
	*sim.Simulator
	calls int
}

func (u *unsupportedFrom) ProgramFPGA(ctx context.Context, addr hardware.Address, region string, img hardware.FPGAImage, p hardware.Progress) error {
	if u.calls++; u.calls > 1 {
		return fmt.Errorf("region %s: %w", region, hardware.ErrUnsupported)
	}
	return u.Simulator.ProgramFPGA(ctx, addr, region, img, p)
}

// TestFPGAUnsupportedAfterAProgrammedRegion: "unsupported" is a refusal
// before acting (which on_unsupported: skip may skip) only before any
// region was programmed; from the tool or the backend after one, the
// card is partly changed and the step fails permanently. Found in review
// (rev1 Low 6: such a card was recorded skipped).
func TestFPGAUnsupportedAfterAProgrammedRegion(t *testing.T) {
	const tool = "/usr/lib/scour/plugins/fpga-xrt"
	unsupportedAfter := func(n int) func(context.Context, string, map[string]any) (*plugins.Result, error) {
		calls := 0
		return func(_ context.Context, _ string, args map[string]any) (*plugins.Result, error) {
			if args["action"] == "readback" { // fpga-program reads each region before programming it
				return &plugins.Result{Status: plugins.StatusOK, Details: map[string]any{"readback_id": "0xtenant"}}, nil
			}
			if calls++; calls > n {
				return nil, plugins.Errorf(plugins.CodeUnsupported, "xbmgmt: region not supported")
			}
			return &plugins.Result{Status: plugins.StatusOK, Details: map[string]any{"readback_id": "0xgolden"}}, nil
		}
	}
	withTool := func(t *testing.T) map[string]any {
		return map[string]any{"image": golden(t, "0xgolden", "0xgolden"), "programmer": tool}
	}
	for _, tc := range []struct {
		name    string
		be      func(t *testing.T) hardware.Backend
		args    func(t *testing.T) map[string]any
		tool    func(context.Context, string, map[string]any) (*plugins.Result, error)
		want    int
		retried bool
	}{
		{"tool, first region", func(t *testing.T) hardware.Backend { return hideProgrammer{fpgaSim(t)} }, withTool, unsupportedAfter(0), plugins.CodeUnsupported, false},
		{"tool, second region", func(t *testing.T) hardware.Backend { return hideProgrammer{fpgaSim(t)} }, withTool, unsupportedAfter(1), plugins.CodePermanent, false},
		{"backend, second region", func(t *testing.T) hardware.Backend { return &unsupportedFrom{Simulator: fpgaSim(t)} },
			func(t *testing.T) map[string]any { return map[string]any{"image": golden(t, "0xgolden", "0xgolden")} }, nil, plugins.CodePermanent, false},
		{"backend, first region", func(t *testing.T) hardware.Backend { return &unsupportedFrom{Simulator: fpgaSim(t), calls: 1} },
			func(t *testing.T) map[string]any { return map[string]any{"image": golden(t, "0xgolden", "0xgolden")} }, nil, plugins.CodeUnsupported, false},
		// After an earlier attempt of the step ran (a retry, a resumed
		// run), even the first call's "unsupported" is no refusal before acting.
		{"tool, first region, retried", func(t *testing.T) hardware.Backend { return hideProgrammer{fpgaSim(t)} }, withTool, unsupportedAfter(0), plugins.CodePermanent, true},
		{"backend, first region, retried", func(t *testing.T) hardware.Backend { return &unsupportedFrom{Simulator: fpgaSim(t), calls: 1} },
			func(t *testing.T) map[string]any { return map[string]any{"image": golden(t, "0xgolden", "0xgolden")} }, nil, plugins.CodePermanent, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fpgaAttempt(t, tc.be(t), "fpga-program", tc.args(t), tc.tool, tc.retried)
			if plugins.CodeOf(err) != tc.want || !strings.Contains(err.Error(), string(fpgaAddr)) {
				t.Fatalf("err %v (code %d), want code %d naming %s", err, plugins.CodeOf(err), tc.want, fpgaAddr)
			}
		})
	}
}

func TestFPGAClearMemory(t *testing.T) {
	s := fpgaSim(t)
	if _, err := fpgaStep(t, s, "fpga-clear-memory", nil, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.StateDir(fpgaAddr), "fpga-memory.img"))
	if err != nil || !zeros([][]byte{b}) {
		t.Errorf("FPGA memory not zero after fpga-clear-memory (%v)", err)
	}
	if _, err := fpgaStep(t, hideProgrammer{s}, "fpga-clear-memory", nil, nil); plugins.CodeOf(err) != plugins.CodeUnsupported {
		t.Errorf("no tool, no backend support: %v, want unsupported", err)
	}
}

// A vendor tool's "ok" alone does not clear a card: only a passed
// read-back of the memory it cleared does. An ok with no verification,
// a failed one or a not-applicable one is a quarantine, with the tool's
// details kept.
func TestFPGAClearMemoryToolMustReadBack(t *testing.T) {
	tool := func(v any) func(context.Context, string, map[string]any) (*plugins.Result, error) {
		return func(_ context.Context, _ string, args map[string]any) (*plugins.Result, error) {
			if args["action"] != "clear-memory" {
				t.Errorf("tool asked %v, want action clear-memory", args)
			}
			d := map[string]any{"bytes": 1 << 30}
			if v != nil {
				d[plugins.VerificationKey] = v
			}
			return plugins.OK(d), nil
		}
	}
	args := map[string]any{"tool": "/usr/lib/scour/plugins/fpga-xrt"}
	if _, err := fpgaStep(t, fpgaSim(t), "fpga-clear-memory", args, tool(map[string]any{"result": "passed", "method": "read-back"})); err != nil {
		t.Errorf("tool cleared and read back: %v", err)
	}
	for name, v := range map[string]any{
		"no verification": nil,
		"failed":          map[string]any{"result": "failed", "mismatch": "offset 0x1000"},
		"not applicable":  map[string]any{"result": "not-applicable", "reason": "no read-back"},
		"not an object":   "zeroed",
	} {
		_, err := fpgaStep(t, fpgaSim(t), "fpga-clear-memory", args, tool(v))
		var pe *plugins.Error
		if !errors.As(err, &pe) || pe.Code != plugins.CodePermanent || !strings.Contains(pe.Msg, "may still hold") || pe.Details["bytes"] == nil {
			t.Errorf("%s: err %#v, want permanent (quarantine) naming the missing read-back, with the tool's details", name, err)
		}
	}
}

// swapProgrammer replaces the golden image's file with a tenant's
// bitstream just before programming (the window between the hash check
// and the use), then programs what it is handed and keeps those bytes.
type swapProgrammer struct {
	*sim.Simulator
	file, evil string
	programmed []byte
}

func (p *swapProgrammer) ProgramFPGA(ctx context.Context, addr hardware.Address, region string, img hardware.FPGAImage, pr hardware.Progress) error {
	if err := os.Rename(p.evil, p.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	b, err := os.ReadFile(img.Path)
	if err != nil {
		return err
	}
	p.programmed = b
	return p.Simulator.ProgramFPGA(ctx, addr, region, img, pr)
}

// The bytes programmed are the bytes whose hash was checked: a local
// golden image replaced after its check is not what reaches the card.
func TestFPGAProgramUsesTheVerifiedBytes(t *testing.T) {
	s := fpgaSim(t)
	ref := golden(t, "0xgolden", "0xgolden")
	file := ref["file"].(string)
	verified, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(filepath.Dir(file), "evil.gbs")
	if err := os.WriteFile(evil, []byte(sim.BitstreamHeader+"0xtenant-evil\nbits"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &swapProgrammer{Simulator: s, file: file, evil: evil}
	if _, err := fpgaStep(t, p, "fpga-program", map[string]any{"image": ref}, nil); err != nil {
		t.Fatalf("fpga-program: %v", err)
	}
	if !bytes.Equal(p.programmed, verified) {
		t.Fatalf("programmed %q, want the verified bytes %q", p.programmed, verified)
	}
	for _, r := range []string{"region0", "region1"} {
		if id := loaded(t, s, r); id != "0xgolden" {
			t.Errorf("%s holds %q: the swapped file was programmed", r, id)
		}
	}
	if now, _ := os.ReadFile(file); bytes.Equal(now, verified) {
		t.Fatal("the file was not swapped: the test proves nothing")
	}
}

// PrivateCopy's copy lives in a 0700 directory, is read-only, and is
// gone after Remove.
func TestPrivateCopy(t *testing.T) {
	src := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(src, []byte("golden"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := PrivateCopy(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("golden"))
	if c.SHA256 != hex.EncodeToString(sum[:]) || c.Size != 6 {
		t.Errorf("copy %+v", c)
	}
	dir, _ := os.Stat(filepath.Dir(c.Path))
	fi, _ := os.Stat(c.Path)
	if dir.Mode().Perm() != 0o700 || fi.Mode().Perm() != 0o400 {
		t.Errorf("directory mode %v, file mode %v; want 0700 and 0400", dir.Mode().Perm(), fi.Mode().Perm())
	}
	c.Remove()
	if _, err := os.Stat(filepath.Dir(c.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the private copy's directory is still there: %v", err)
	}
	if _, err := PrivateCopy(context.Background(), filepath.Dir(src)); err == nil {
		t.Error("a directory was copied as an image")
	}
}

// TestFPGAProgramNoSpaceForPrivateCopyIsRetried: a full file system under
// the private copy's directory is the host's problem, not the step's
// config: try again later (device reserved, not quarantined or marked
// misconfigured), naming the directory and the space needed, nothing
// programmed.
func TestFPGAProgramNoSpaceForPrivateCopyIsRetried(t *testing.T) {
	s := fpgaSim(t)
	ref := golden(t, "0xgolden", "0xgolden")
	copyBytes = func(io.Writer, io.Reader) (int64, error) {
		return 0, &os.PathError{Op: "write", Path: "copy", Err: syscall.ENOSPC}
	}
	t.Cleanup(func() { copyBytes = io.Copy })
	_, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": ref}, nil)
	if plugins.CodeOf(err) != plugins.CodeTryAgainLater || !strings.Contains(err.Error(), os.TempDir()) || !strings.Contains(err.Error(), "bytes free there") {
		t.Fatalf("fpga-program with no space for the private copy: %v (code %d), want try-again-later naming %s and the space needed", err, plugins.CodeOf(err), os.TempDir())
	}
	if id := loaded(t, s, "region0"); id != "0xtenant" {
		t.Errorf("region0 holds %q: programmed without its private copy", id)
	}
}

// clearUnsupported is a simulated FPGA whose backend cannot clear memory.
type clearUnsupported struct{ *sim.Simulator }

func (clearUnsupported) ClearFPGAMemory(context.Context, hardware.Address, hardware.Progress) (map[string]any, error) {
	return nil, hardware.ErrUnsupported
}

// The backend's "cannot clear its memory" is a refusal before acting on
// the step's first attempt only: after an earlier attempt ran, the
// memory may be partly cleared, and skipping would hide it.
func TestFPGAClearMemoryUnsupportedOnARetry(t *testing.T) {
	for _, retried := range []bool{false, true} {
		want := plugins.CodeUnsupported
		if retried {
			want = plugins.CodePermanent
		}
		if _, err := fpgaAttempt(t, clearUnsupported{fpgaSim(t)}, "fpga-clear-memory", nil, nil, retried); plugins.CodeOf(err) != want {
			t.Errorf("retried %t: %v (code %d), want code %d", retried, err, plugins.CodeOf(err), want)
		}
	}
}

// fpga3 is a simulated card with three regions, each holding the last
// tenant's bitstream.
func fpga3(t *testing.T) *sim.Simulator {
	return newSim(t, hardware.SimDevice{Address: string(fpgaAddr), Kind: hardware.KindFPGA, FPGARegions: 3, BitstreamID: "0xtenant"})
}

// args.regions naming only some of the card's regions left the others
// with the tenant's bitstream while the read-back of the named ones
// passed (found in review). Every region discovery finds must be
// programmed or excluded with the reason a tenant cannot program it;
// otherwise nothing is programmed, the step fails as a refusal (code 3:
// the step's configuration) with a failed verification, so that no run
// goes on to clean, and the record says which regions were left out.
func TestFPGAProgramCoversEveryDiscoveredRegion(t *testing.T) {
	image := func(t *testing.T) map[string]any { return golden(t, "0xgolden", "0xgolden") }
	t.Run("a region left out", func(t *testing.T) {
		s := fpga3(t)
		_, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": image(t), "regions": []any{"region0", "region1"}}, nil)
		var pe *plugins.Error
		if !errors.As(err, &pe) || pe.Code != plugins.CodeInvalidConfig || !strings.Contains(pe.Msg, "region2") || !strings.Contains(pe.Msg, "exclude_regions") {
			t.Fatalf("err %v, want a refusal (code 3) naming region2 and exclude_regions", err)
		}
		if r, _ := plugins.VerificationResult(pe.Details); r != plugins.VerifyFailed {
			t.Errorf("verification %v, want failed (the run must not go on to clean)", pe.Details[plugins.VerificationKey])
		}
		cov, _ := pe.Details[CoverageKey].(map[string]any)
		if fmt.Sprint(cov["uncovered"]) != "[region2]" {
			t.Errorf("coverage %v, want region2 uncovered", cov)
		}
		for _, r := range []string{"region0", "region1", "region2"} {
			if id := loaded(t, s, r); id != "0xtenant" {
				t.Errorf("%s holds %q: something was programmed", r, id)
			}
		}
	})
	t.Run("the region left out is excluded with a reason", func(t *testing.T) {
		s := fpga3(t)
		res, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": image(t), "regions": []any{"region0", "region1"},
			"exclude_regions": map[string]any{"region2": "wired to the host's NIC, no tenant can load it"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cov := res.Details[CoverageKey].(map[string]any)
		if fmt.Sprint(cov["programmed"]) != "[region0 region1]" || cov["excluded"].(map[string]string)["region2"] == "" || fmt.Sprint(cov["discovered"]) != "[region0 region1 region2]" {
			t.Errorf("coverage %v", cov)
		}
	})
	t.Run("default: every region but the excluded", func(t *testing.T) {
		s := fpga3(t)
		res, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": image(t), "exclude_regions": map[string]any{"region0": "static FIM region"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if loaded(t, s, "region0") != "0xtenant" || loaded(t, s, "region1") != "0xgolden" || loaded(t, s, "region2") != "0xgolden" {
			t.Errorf("regions hold %s %s %s, want region0 left alone and the others golden", loaded(t, s, "region0"), loaded(t, s, "region1"), loaded(t, s, "region2"))
		}
		if rs := res.Details[ReadbackKey].(map[string]any)["regions"].([]regionResult); len(rs) != 2 || rs[0].Region != "region1" {
			t.Errorf("read back %v, want region1 and region2", rs)
		}
	})
	t.Run("every region excluded", func(t *testing.T) {
		_, err := fpgaStep(t, fpga3(t), "fpga-program", map[string]any{"image": image(t),
			"exclude_regions": map[string]any{"region0": "a", "region1": "b", "region2": "c"}}, nil)
		if plugins.CodeOf(err) != plugins.CodeInvalidConfig || !strings.Contains(err.Error(), "excludes every region") {
			t.Errorf("err %v, want a refusal: nothing would be programmed", err)
		}
	})
	spec, _ := Lookup("fpga-program")
	for name, a := range map[string]map[string]any{
		"no reason":           {"image": image(t), "exclude_regions": map[string]any{"region0": " "}},
		"not a map":           {"image": image(t), "exclude_regions": []any{"region0"}},
		"named and excluded":  {"image": image(t), "regions": []any{"region0"}, "exclude_regions": map[string]any{"region0": "static"}},
		"reason not a string": {"image": image(t), "exclude_regions": map[string]any{"region0": true}},
	} {
		if err := spec.CheckArgs(a); err == nil || !strings.Contains(err.Error(), "exclude_regions") && !strings.Contains(err.Error(), "both") {
			t.Errorf("%s: CheckArgs %v, want an error", name, err)
		}
	}
}

// staticRegion0 is a card whose sysfs id for region0 is its static
// shell's, the same before and after programming (a DFL card's FME
// bitstream_id), whatever is programmed there.
type staticRegion0 struct{ *sim.Simulator }

func (s staticRegion0) FPGALoadedID(ctx context.Context, addr hardware.Address, region string) (string, error) {
	if region == "region0" {
		return "0xfim", nil
	}
	return s.Simulator.FPGALoadedID(ctx, addr, region)
}

// The read-back proves programming only where the id changed to the
// golden one: each region's id is read before programming too, and a
// region that already reported the golden id (the known-good image was
// there, or the id read is not the region's own: a DFL card's static
// region) is recorded "unchanged", with programming_proven false and a
// note saying the read-back proves nothing about the write (found in
// review: such a read-back was recorded as if it proved the programming).
func TestFPGAProgramRecordsTheIDsBeforeProgramming(t *testing.T) {
	s := fpgaSim(t)
	args := map[string]any{"image": golden(t, "0xgolden", "0xgolden")}
	res, err := fpgaStep(t, s, "fpga-program", args, nil)
	if err != nil {
		t.Fatal(err)
	}
	rb := res.Details[ReadbackKey].(map[string]any)
	rs := rb["regions"].([]regionResult)
	if rb["programming_proven"] != true || rs[0].Before != "0xtenant" || rs[0].Change != changeChanged || rb["note"] != nil {
		t.Errorf("from a tenant's bitstream: %v, want before 0xtenant, changed, programming proven", rb)
	}
	// The card holds the golden image already: passes, proves no write.
	res, err = fpgaStep(t, s, "fpga-program", args, nil)
	if err != nil {
		t.Fatal(err)
	}
	rb = res.Details[ReadbackKey].(map[string]any)
	if rb["programming_proven"] != false || rb["regions"].([]regionResult)[0].Change != changeUnchanged || !strings.HasPrefix(fmt.Sprint(rb["note"]), "unchanged") {
		t.Errorf("golden already: %v, want unchanged, programming not proven, with a note", rb)
	}
	// region0's id is the static shell's: an image declaring it passes
	// there, and the record says the read-back proves no write.
	res, err = fpgaStep(t, staticRegion0{fpgaSim(t)}, "fpga-program", map[string]any{"image": golden(t, "0xfim", "0xfim"), "regions": []any{"region0", "region1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rb = res.Details[ReadbackKey].(map[string]any)
	rs = rb["regions"].([]regionResult)
	if rb["programming_proven"] != false || rs[0].Change != changeUnchanged || rs[1].Change != changeChanged || !strings.Contains(fmt.Sprint(rb["note"]), "[region0]") {
		t.Errorf("static region0: %v, want region0 unchanged, region1 changed, programming not proven", rb)
	}
	// A tool's word before programming counts where sysfs says nothing.
	tool := func(_ context.Context, _ string, a map[string]any) (*plugins.Result, error) {
		id := "0xgolden"
		if a["action"] == "readback" {
			id = "0xtenant"
		}
		return &plugins.Result{Status: plugins.StatusOK, Details: map[string]any{"readback_id": id}}, nil
	}
	res, err = fpgaStep(t, hideProgrammer{fpgaSim(t)}, "fpga-program", map[string]any{"image": golden(t, "0xgolden", "0xgolden"), "programmer": "/usr/lib/scour/plugins/fpga-xrt"}, tool)
	if err != nil {
		t.Fatal(err)
	}
	rb = res.Details[ReadbackKey].(map[string]any)
	if rs := rb["regions"].([]regionResult); rb["programming_proven"] != true || rs[0].Before != "0xtenant" || rs[0].Source != "tool" {
		t.Errorf("tool read before and after: %v", rb)
	}
}

// fpga-readback's and a not-reported read-back's failures are failed
// verifications too (TestFPGAProgramReadbackDiffersQuarantines: a
// mismatch); a passed read-back reports none.
func TestFPGAReadbackMismatchIsAFailedVerification(t *testing.T) {
	s := fpgaSim(t)
	res, err := fpgaStep(t, s, "fpga-program", map[string]any{"image": golden(t, "0xgolden", "0xgolden")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored := asStored(t, res.Details)
	if _, ok := stored[plugins.VerificationKey]; ok {
		t.Errorf("a passed read-back reported a verification: %v (it must not count as a purge's verification)", stored)
	}
	if err := s.ProgramFPGA(context.Background(), fpgaAddr, "region0", hardware.FPGAImage{Path: golden(t, "0xtenant2", "")["file"].(string)}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = fpgaStep(t, s, "fpga-readback", nil, nil, stored)
	var pe *plugins.Error
	if !errors.As(err, &pe) || pe.Code != plugins.CodePermanent {
		t.Fatalf("fpga-readback: %v, want permanent", err)
	}
	if r, _ := plugins.VerificationResult(pe.Details); r != plugins.VerifyFailed {
		t.Errorf("fpga-readback verification %v, want failed", pe.Details[plugins.VerificationKey])
	}
	// Nothing reports an id: failed too, saying why.
	_, err = fpgaStep(t, hideProgrammer{fpgaSim(t)}, "fpga-program", map[string]any{"image": golden(t, "0xgolden", "0xgolden"), "programmer": "/p"},
		func(context.Context, string, map[string]any) (*plugins.Result, error) { return plugins.OK(nil), nil })
	if !errors.As(err, &pe) {
		t.Fatal(err)
	}
	if v, _ := pe.Details[plugins.VerificationKey].(map[string]any); v["result"] != plugins.VerifyFailed || !strings.Contains(fmt.Sprint(v["reason"]), "neither sysfs nor the tool") {
		t.Errorf("nothing read back: verification %v", v)
	}
}
