package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

func init() {
	register(Spec{
		Name:        "fpga-program",
		InDevice:    true,
		Destructive: true,
		Does:        "resolve args.image (a local file checked against its sha256, or a Glance image verified against its hash) and put it into each region (args.regions, default every fpga_region; a card with none: the whole device) through args.programmer (a plugin running the vendor tool: OPAE fpgaconf, XRT xbmgmt program) or the backend; then each region must report the id the image declares (property args.id_property, default bitstream_id), else the device is quarantined",
		Run:         fpgaProgram,
		CheckArgs:   checkFPGAProgramArgs,
		PluginArgs:  []string{"programmer"},
	})
	register(Spec{
		Name:     "fpga-readback",
		InDevice: true,
		Does:     "read back the id each region programmed by the run's fpga-program step reports (after a reset, say) and compare it with the image's; a difference quarantines the device",
		Run:      fpgaReadback,
		CheckArgs: func(a map[string]any) error {
			return errors.Join(onlyArgs(a, "programmer", "timeout"), checkTimeout(a))
		},
		PluginArgs: []string{"programmer"},
	})
	register(Spec{
		Name:        "fpga-clear-memory",
		InDevice:    true,
		Destructive: true,
		Does:        "zero the card's memory and read it back, through args.tool (a plugin running the vendor tool) or the backend; unsupported where neither can",
		Run:         fpgaClearMemory,
		CheckArgs:   func(a map[string]any) error { return errors.Join(onlyArgs(a, "tool", "timeout"), checkTimeout(a)) },
		PluginArgs:  []string{"tool"},
	})
}

// ReadbackKey is the details key under which fpga-program and
// fpga-readback report the read-back; ImageKey names the image.
const (
	ReadbackKey = "readback"
	ImageKey    = "image"
)

// defaultToolTimeout bounds one run of a vendor tool: one that runs past
// it hung, and the device is quarantined with what it printed.
const defaultToolTimeout = 15 * time.Minute

func checkTimeout(a map[string]any) error {
	_, err := argDuration(a, "timeout", defaultToolTimeout)
	return err
}

func checkFPGAProgramArgs(a map[string]any) error {
	_, err := imageRef(a)
	_, rerr := fpgaRegionsArg(a)
	_, perr := argString(a, "programmer", "")
	_, ierr := argString(a, "id_property", "bitstream_id")
	return errors.Join(onlyArgs(a, "image", "regions", "programmer", "id_property", "timeout"), err, rerr, perr, ierr, checkTimeout(a))
}

func fpgaRegionsArg(a map[string]any) ([]string, error) {
	raw, ok := a["regions"]
	if !ok || raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return nil, errors.New("regions: want a non-empty list of fpga_region names (region1)")
	}
	out := make([]string, len(list))
	for i, v := range list {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("regions[%d]: %v is not a region name", i, v)
		}
		out[i] = s
	}
	return out, nil
}

// toolRun runs a vendor tool plugin under the step's tool timeout. A
// tool that exits non-zero, breaks the protocol, or runs past the timeout
// (hung: its process group is killed) is a permanent failure: a card
// left in an unknown state is quarantined, and the record keeps what the
// tool said (its message, and its stderr in the step's stderr). Its
// "unsupported" (code 2) stays unsupported only while no earlier tool
// call of the step succeeded and no earlier attempt of the step ran
// (Target.Retried): after either the card may be partly changed, and a
// step skipped for it would hide that.
func toolRun(ctx context.Context, t *Target, path string, args map[string]any, what string) (*plugins.Result, error) {
	if t.RunPlugin == nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: %s plugin %s: this engine runs no plugins", t.Step, what, path)
	}
	limit, err := argDuration(t.Args, "timeout", defaultToolTimeout)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	res, err := t.RunPlugin(tctx, path, args, t.progress)
	if err == nil {
		t.toolsDone++
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, err // the step itself ends (timeout, shutdown): the engine words it
	}
	pe := *plugins.AsError(err)
	words := pe.Msg
	switch {
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		pe.Msg = fmt.Sprintf("%s of %s: %s hung: no answer within %s, its process group was killed; the card's state is unknown, so it is quarantined (tool said: %s)", what, t.Device.Address, path, limit, words)
	case pe.Code == plugins.CodeUnsupported && t.toolsDone == 0 && !t.Retried:
		pe.Msg = fmt.Sprintf("%s of %s: %s: %s", what, t.Device.Address, path, words)
		return nil, &pe
	case pe.Code == plugins.CodeUnsupported && t.toolsDone == 0:
		pe.Msg = fmt.Sprintf("%s of %s: %s answered unsupported on a retry of this step, after an earlier attempt ran: %s; the card may be partly changed, so it is quarantined", what, t.Device.Address, path, words)
	case pe.Code == plugins.CodeUnsupported:
		pe.Msg = fmt.Sprintf("%s of %s: %s answered unsupported after %d earlier call(s) of this step succeeded: %s; the card is partly changed, so it is quarantined", what, t.Device.Address, path, t.toolsDone, words)
	default:
		pe.Msg = fmt.Sprintf("%s of %s: %s failed (code %d): %s; the card's state is unknown, so it is quarantined", what, t.Device.Address, path, pe.Code, words)
	}
	pe.Code = plugins.CodePermanent
	if pe.Details == nil {
		pe.Details = map[string]any{}
	}
	pe.Details["tool"] = path
	pe.Details["tool_said"] = words
	if pe.Stderr != "" {
		pe.Details["tool_stderr"] = pe.Stderr
	}
	return nil, &pe
}

// regionResult is one region's read-back.
type regionResult struct {
	Region   string `json:"region"`
	Reported string `json:"reported"`
	// Source says who reported the id: "sysfs" (the backend) or the tool.
	Source string `json:"source"`
	Result string `json:"result"`
}

func fpgaProgram(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	if err := checkFPGAProgramArgs(t.Args); err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: %v", t.Step, err)
	}
	addr := t.Device.Address
	if t.Device.Kind != hardware.KindFPGA {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "step %s: %s is a %s device, not an FPGA", t.Step, addr, t.Device.Kind)
	}
	programmer, _ := argString(t.Args, "programmer", "")
	fp, canProgram := be.(hardware.FPGAProgrammer)
	if programmer == "" && !canProgram {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "step %s: this backend cannot program FPGAs: give args.programmer", t.Step)
	}
	img, release, err := resolveImage(ctx, t)
	if err != nil {
		return nil, err
	}
	defer release()
	prop, _ := argString(t.Args, "id_property", "bitstream_id")
	want := strings.TrimSpace(img.Properties[prop])
	details := map[string]any{ImageKey: img.Map()}
	if want == "" {
		return nil, &plugins.Error{Code: plugins.CodeInvalidConfig, Details: details,
			Msg: fmt.Sprintf("step %s: golden image %q declares no %s: nothing to compare the read-back with, so %s is not programmed (set the image's %s property)", t.Step, img.Name, prop, addr, prop)}
	}
	regions, _ := fpgaRegionsArg(t.Args)
	if regions == nil && t.Device.FPGA != nil {
		for _, r := range t.Device.FPGA.Regions {
			regions = append(regions, r.Name)
		}
	}
	if len(regions) == 0 {
		regions = []string{""} // a card whose driver registers no region: the whole device
	}
	toolIDs := map[string]string{}
	for i, region := range regions {
		if programmer != "" {
			res, err := toolRun(ctx, t, programmer, map[string]any{"action": "program", "region": region, "image_file": img.Path,
				"image_id": img.ID, "image_hash_algo": img.HashAlgo, "image_hash_value": img.HashValue}, "programming "+img.Name)
			if err != nil {
				return nil, withDetails(err, details)
			}
			if id, ok := res.Details["readback_id"].(string); ok {
				toolIDs[region] = id
			}
			details["programmer"] = map[string]any{"path": programmer, "sha256": res.SHA256}
			continue
		}
		if err := fp.ProgramFPGA(ctx, addr, region, hardware.FPGAImage{Path: img.Path, ID: want}, t.progress); err != nil {
			pe := plugins.AsError(fmt.Errorf("programming %s into %s region %q: %w", img.Name, addr, region, err))
			// Unsupported is a refusal before acting only for the first
			// region of a first attempt: after one was programmed, or an
			// earlier attempt ran, the card may be partly changed.
			if (i > 0 || t.Retried || !errors.Is(err, hardware.ErrUnsupported)) && ctx.Err() == nil {
				pe.Code = plugins.CodePermanent
			}
			return nil, withDetails(pe, details)
		}
	}
	rb, err := readBack(ctx, be, t, want, regions, toolIDs)
	details[ReadbackKey] = rb
	if err != nil {
		return nil, withDetails(err, details)
	}
	return plugins.OK(details), nil
}

// readBack asks each region for its id: the backend first (sysfs, or
// the simulator), the tool's readback_id where the backend cannot say.
func readBack(ctx context.Context, be hardware.Backend, t *Target, want string, regions []string, toolIDs map[string]string) (map[string]any, error) {
	fp, _ := be.(hardware.FPGAProgrammer)
	var results []regionResult
	var bad []string
	for _, region := range regions {
		r := regionResult{Region: region, Source: "sysfs"}
		var err error
		if fp != nil {
			r.Reported, err = fp.FPGALoadedID(ctx, t.Device.Address, region)
		} else {
			err = hardware.ErrUnsupported
		}
		if errors.Is(err, hardware.ErrUnsupported) {
			id, ok := toolIDs[region]
			if !ok {
				bad = append(bad, fmt.Sprintf("region %q: neither sysfs nor the tool reports an id (the programmer must answer details.readback_id)", region))
				r.Result = "not-reported"
				results = append(results, r)
				continue
			}
			r.Reported, r.Source, err = id, "tool", nil
		}
		if err != nil {
			return nil, plugins.Errorf(plugins.CodeTryAgainLater, "step %s: reading back region %q of %s: %v", t.Step, region, t.Device.Address, err)
		}
		r.Result = "passed"
		if !strings.EqualFold(strings.TrimSpace(r.Reported), want) {
			r.Result = "failed"
			bad = append(bad, fmt.Sprintf("region %q reports %q (%s)", region, r.Reported, r.Source))
		}
		results = append(results, r)
	}
	out := map[string]any{"expected": want, "regions": results, "result": "passed"}
	if len(bad) > 0 {
		out["result"] = "failed"
		return out, plugins.Errorf(plugins.CodePermanent, "step %s: read-back of %s after programming: want id %q, but %s: the card does not hold the golden image, so it is quarantined",
			t.Step, t.Device.Address, want, strings.Join(bad, "; "))
	}
	return out, nil
}

func withDetails(err error, details map[string]any) error {
	pe := *plugins.AsError(err)
	d := make(map[string]any, len(details)+len(pe.Details))
	for k, v := range details {
		d[k] = v
	}
	for k, v := range pe.Details {
		d[k] = v
	}
	pe.Details = d
	return &pe
}

// ProgrammedOf reads what a succeeded fpga-program step reported: the
// id its regions had to hold, and the regions.
func ProgrammedOf(details map[string]any) (want string, regions []string, ok bool) {
	rb, ok := details[ReadbackKey].(map[string]any)
	if !ok {
		return "", nil, false
	}
	want, _ = rb["expected"].(string)
	switch rs := rb["regions"].(type) {
	case []regionResult:
		for _, r := range rs {
			regions = append(regions, r.Region)
		}
	case []any: // as stored: JSON
		for _, r := range rs {
			m, _ := r.(map[string]any)
			name, _ := m["region"].(string)
			regions = append(regions, name)
		}
	}
	return want, regions, want != "" && len(regions) > 0
}

func fpgaReadback(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	var want string
	var regions []string
	for i := len(t.Earlier) - 1; i >= 0 && want == ""; i-- {
		want, regions, _ = ProgrammedOf(t.Earlier[i])
	}
	if want == "" {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "step %s: no fpga-program step succeeded earlier in this run: nothing to read back on %s (put fpga-program before it)", t.Step, t.Device.Address)
	}
	toolIDs := map[string]string{}
	// The tool is not told the id it should find (nor is it when it
	// programs): a tool that echoed it back would pass a card it never read.
	if tool, _ := argString(t.Args, "programmer", ""); tool != "" {
		for _, region := range regions {
			res, err := toolRun(ctx, t, tool, map[string]any{"action": "readback", "region": region}, "reading back")
			if err != nil {
				return nil, err
			}
			if id, ok := res.Details["readback_id"].(string); ok {
				toolIDs[region] = id
			}
		}
	}
	rb, err := readBack(ctx, be, t, want, regions, toolIDs)
	details := map[string]any{ReadbackKey: rb}
	if err != nil {
		return nil, withDetails(err, details)
	}
	return plugins.OK(details), nil
}

func fpgaClearMemory(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	addr := t.Device.Address
	if tool, _ := argString(t.Args, "tool", ""); tool != "" {
		res, err := toolRun(ctx, t, tool, map[string]any{"action": "clear-memory"}, "clearing the memory")
		if err != nil {
			return nil, err
		}
		d := map[string]any{"tool": tool}
		for k, v := range res.Details {
			d[k] = v
		}
		// The tool's "ok" alone is its word that it cleared the memory; a
		// card returned on that word alone may still hold the last
		// tenant's data. Only a passed read-back (details.verification)
		// counts, as for a step that verifies.
		if j, why := plugins.JudgeVerification(res.Details, true); j != plugins.Verified {
			return nil, withDetails(plugins.Errorf(plugins.CodePermanent,
				"step %s: clearing the memory of FPGA %s: %s answered ok but %s; the card may still hold the last tenant's data, so it is quarantined (the tool must read the memory back and report details.verification.result: passed)",
				t.Step, addr, tool, why), d)
		}
		return plugins.OK(d), nil
	}
	fp, ok := be.(hardware.FPGAProgrammer)
	if !ok || t.Device.Kind != hardware.KindFPGA {
		return nil, plugins.Errorf(plugins.CodeUnsupported, "step %s: %s: no tool configured and the backend cannot clear its memory", t.Step, addr)
	}
	d, err := fp.ClearFPGAMemory(ctx, addr, t.progress)
	if err != nil {
		pe := plugins.AsError(fmt.Errorf("clearing the memory of FPGA %s: %w", addr, err))
		switch {
		case errors.Is(err, hardware.ErrUnsupported) && t.Retried:
			pe.Code = plugins.CodePermanent
			pe.Msg += " (on a retry of this step, after an earlier attempt ran: the card's memory may be partly cleared, so it is quarantined)"
		case errors.Is(err, hardware.ErrUnsupported):
			pe.Code = plugins.CodeUnsupported
		}
		return nil, pe
	}
	return plugins.OK(d), nil
}
