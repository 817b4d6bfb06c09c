package builtin

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
		Does:        "resolve args.image (a local file checked against its sha256, or a Glance image verified against its hash) and put it into each region (args.regions, default every fpga_region but those args.exclude_regions excludes with the reason a tenant cannot program them; a card with none: the whole device; a discovered region neither named nor excluded refuses the step) through args.programmer (a plugin running the vendor tool: OPAE fpgaconf, XRT xbmgmt program) or the backend; each region's id is read before and after, and after programming it must be the id the image declares (property args.id_property, default bitstream_id), else the device is quarantined",
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
	regions, rerr := fpgaRegionsArg(a)
	excluded, xerr := fpgaExcludeArg(a)
	_, perr := argString(a, "programmer", "")
	_, ierr := argString(a, "id_property", "bitstream_id")
	var both []string
	for _, r := range regions {
		if _, ok := excluded[r]; ok {
			both = append(both, r)
		}
	}
	var berr error
	if len(both) > 0 {
		berr = fmt.Errorf("regions %v are both in regions and in exclude_regions", both)
	}
	return errors.Join(onlyArgs(a, "image", "regions", "exclude_regions", "programmer", "id_property", "timeout"), err, rerr, xerr, berr, perr, ierr, checkTimeout(a))
}

// fpgaExcludeArg reads args.exclude_regions: region name -> why the
// tenant cannot program it (the static FIM region0 of a DFL card, whose
// id sysfs reads is the card's own shell, not a tenant's bitstream). An
// excluded region is neither programmed nor read back, and the record
// keeps the reason.
func fpgaExcludeArg(a map[string]any) (map[string]string, error) {
	raw, ok := a["exclude_regions"]
	if !ok || raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, errors.New(`exclude_regions: want a map of region name to the reason a tenant cannot program it ({region0: "static FIM region: tenants load only partial bitstreams"})`)
	}
	out := make(map[string]string, len(m))
	var errs []error
	for r, v := range m {
		why, ok := v.(string)
		if r == "" || !ok || strings.TrimSpace(why) == "" {
			errs = append(errs, fmt.Errorf("exclude_regions.%s: give the reason a tenant cannot program this region (it is recorded)", r))
			continue
		}
		out[r] = strings.TrimSpace(why)
	}
	return out, errors.Join(errs...)
}

// CoverageKey is the details key under which fpga-program says which of
// the card's regions it programmed and read back, which it left out and
// why.
const CoverageKey = "region_coverage"

// fpgaRegionPlan decides the regions fpga-program programs: args.regions,
// or every region discovery found but the excluded ones. Every
// discovered region must be programmed or excluded with a reason: a
// region left out silently keeps the last tenant's bitstream while the
// read-back of the others passes. coverage is what the record says.
func fpgaRegionPlan(t *Target) (regions []string, coverage map[string]any, err error) {
	named, _ := fpgaRegionsArg(t.Args)
	excluded, _ := fpgaExcludeArg(t.Args)
	var discovered []string
	if t.Device.FPGA != nil {
		for _, r := range t.Device.FPGA.Regions {
			discovered = append(discovered, r.Name)
		}
	}
	regions = named
	if regions == nil {
		for _, r := range discovered {
			if _, ok := excluded[r]; !ok {
				regions = append(regions, r)
			}
		}
	}
	var uncovered []string
	for _, r := range discovered {
		_, out := excluded[r]
		if !out && !slices.Contains(regions, r) {
			uncovered = append(uncovered, r)
		}
	}
	if len(regions) == 0 && len(discovered) == 0 {
		regions = []string{""} // a card whose driver registers no region: the whole device
	}
	coverage = map[string]any{"discovered": orEmpty(discovered), "programmed": orEmpty(regions)}
	if len(excluded) > 0 {
		coverage["excluded"] = excluded
	}
	switch {
	case len(uncovered) > 0:
		coverage["uncovered"] = uncovered
		why := fmt.Sprintf("FPGA regions %v of %s are neither in args.regions %v nor in args.exclude_regions: a tenant's bitstream there would be neither replaced nor read back", uncovered, t.Device.Address, named)
		return nil, coverage, &plugins.Error{Code: plugins.CodeInvalidConfig,
			Details: map[string]any{CoverageKey: coverage, plugins.VerificationKey: readbackVerification("", plugins.VerifyFailed, "", why)},
			Msg:     fmt.Sprintf("step %s: %s; nothing is programmed and the card stays reserved (name them in args.regions, or exclude each with the reason a tenant cannot program it: exclude_regions: {%s: \"...\"})", t.Step, why, uncovered[0])}
	case len(regions) == 0:
		why := fmt.Sprintf("args.exclude_regions excludes every region of %s (%v): nothing would be programmed or read back", t.Device.Address, discovered)
		return nil, coverage, &plugins.Error{Code: plugins.CodeInvalidConfig,
			Details: map[string]any{CoverageKey: coverage, plugins.VerificationKey: readbackVerification("", plugins.VerifyFailed, "", why)},
			Msg:     fmt.Sprintf("step %s: %s; the card stays reserved", t.Step, why)}
	}
	return regions, coverage, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// readbackVerification is the read-back as a verification (details
// VerificationKey), which fpga-program and fpga-readback report when it
// did not pass: the engine then ends the run whatever the step's
// required says, as for any verification that did not pass (a card
// holding another bitstream than the golden one, or one nobody could
// read back, is never returned). A passed read-back is not reported so:
// it checks the card's logic, not media, and must not count as a purge
// pipeline's verification of an erase.
func readbackVerification(want, result, mismatch, reason string) map[string]any {
	v := plugins.Verification{Method: "read-back of the id each FPGA region reports", Result: result, Mismatch: mismatch, Reason: reason}
	if want != "" {
		v.Expected = "id " + want + " in every programmed region"
	} else {
		v.Expected = "the golden image's id in every region the card has"
	}
	return v.Map()
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
	Region string `json:"region"`
	// Before is the id the region reported before fpga-program
	// programmed it ("" when nobody could say, or in fpga-readback).
	Before   string `json:"before,omitempty"`
	Reported string `json:"reported"`
	// Source says who reported the id: "sysfs" (the backend) or the tool.
	Source string `json:"source"`
	Result string `json:"result"`
	// Change (fpga-program only) says what the ids before and after show:
	// "changed" (programming replaced another id with the golden one),
	// "unchanged" (the region reported the golden id before programming
	// already: the read-back shows the golden image is there, not that
	// programming wrote it), or "before unknown".
	Change string `json:"change,omitempty"`
}

// Changes of regionResult.
const (
	changeChanged   = "changed"
	changeUnchanged = "unchanged"
	changeUnknown   = "before unknown"
)

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
	regions, coverage, err := fpgaRegionPlan(t)
	if err != nil {
		return nil, err
	}
	img, release, err := resolveImage(ctx, t)
	if err != nil {
		return nil, withDetails(err, map[string]any{CoverageKey: coverage})
	}
	defer release()
	prop, _ := argString(t.Args, "id_property", "bitstream_id")
	want := strings.TrimSpace(img.Properties[prop])
	details := map[string]any{ImageKey: img.Map(), CoverageKey: coverage}
	if want == "" {
		return nil, &plugins.Error{Code: plugins.CodeInvalidConfig, Details: details,
			Msg: fmt.Sprintf("step %s: golden image %q declares no %s: nothing to compare the read-back with, so %s is not programmed (set the image's %s property)", t.Step, img.Name, prop, addr, prop)}
	}
	before := idsBefore(ctx, be, t, programmer, regions)
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
	rb, err := readBack(ctx, be, t, want, regions, toolIDs, before)
	details[ReadbackKey] = rb
	if err != nil {
		return nil, withDetails(err, details)
	}
	return plugins.OK(details), nil
}

// idsBefore reads what each region reports before it is programmed, as
// the read-back after will (sysfs first, else the programmer's readback
// action), so that the record can tell a region programming changed to
// the golden id from one that reported it already (a DFL card's static
// region, whose sysfs id is its own shell's; a tool that reads the base
// shell's id). Nothing here fails the step: what cannot be read is
// recorded as unknown, and the read-back after programming decides.
func idsBefore(ctx context.Context, be hardware.Backend, t *Target, programmer string, regions []string) map[string]string {
	fp, _ := be.(hardware.FPGAProgrammer)
	out := map[string]string{}
	for _, region := range regions {
		err := hardware.ErrUnsupported
		var id string
		if fp != nil {
			id, err = fp.FPGALoadedID(ctx, t.Device.Address, region)
		}
		if errors.Is(err, hardware.ErrUnsupported) && programmer != "" && t.RunPlugin != nil {
			id, err = toolReadBefore(ctx, t, programmer, region)
		}
		if err == nil && strings.TrimSpace(id) != "" {
			out[region] = strings.TrimSpace(id)
		}
	}
	return out
}

// toolReadBefore asks the programmer for region's id (action readback)
// under the step's tool timeout. Its answer does not count as a tool call
// that changed the card (Target.toolsDone): it only reads.
func toolReadBefore(ctx context.Context, t *Target, programmer, region string) (string, error) {
	limit, err := argDuration(t.Args, "timeout", defaultToolTimeout)
	if err != nil {
		return "", err
	}
	tctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	res, err := t.RunPlugin(tctx, programmer, map[string]any{"action": "readback", "region": region}, func(float64) {})
	if err != nil {
		return "", err
	}
	id, _ := res.Details["readback_id"].(string)
	return id, nil
}

// readBack asks each region for its id: the backend first (sysfs, or
// the simulator), the tool's readback_id where the backend cannot say.
// before (fpga-program's idsBefore; nil for fpga-readback) says what the
// regions reported before programming: the result then says whether the
// read-back proves programming changed them (programming_proven).
//
// A read-back that does not pass (an id other than the golden one, none
// reported, a read error) also reports a failed verification
// (readbackVerification), so the run ends there whatever the step's
// required says.
func readBack(ctx context.Context, be hardware.Backend, t *Target, want string, regions []string, toolIDs, before map[string]string) (map[string]any, error) {
	fp, _ := be.(hardware.FPGAProgrammer)
	var results []regionResult
	var bad, notReported, unchanged []string
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
				notReported = append(notReported, fmt.Sprintf("region %q: neither sysfs nor the tool reports an id (the programmer must answer details.readback_id)", region))
				r.Result = "not-reported"
				results = append(results, r)
				continue
			}
			r.Reported, r.Source, err = id, "tool", nil
		}
		if err != nil {
			why := fmt.Sprintf("reading back region %q of %s: %v", region, t.Device.Address, err)
			return nil, &plugins.Error{Code: plugins.CodeTryAgainLater, Msg: fmt.Sprintf("step %s: %s", t.Step, why),
				Details: map[string]any{plugins.VerificationKey: readbackVerification(want, plugins.VerifyFailed, "", "could not read back: "+why)}}
		}
		r.Result = "passed"
		if !strings.EqualFold(strings.TrimSpace(r.Reported), want) {
			r.Result = "failed"
			bad = append(bad, fmt.Sprintf("region %q reports %q (%s)", region, r.Reported, r.Source))
		}
		if before != nil {
			b, known := before[region]
			r.Before = b
			switch {
			case !known:
				r.Change = changeUnknown
			case strings.EqualFold(b, want):
				r.Change = changeUnchanged
				unchanged = append(unchanged, region)
			default:
				r.Change = changeChanged
			}
		}
		results = append(results, r)
	}
	out := map[string]any{"expected": want, "regions": results, "result": "passed"}
	if before != nil {
		proven := true
		for _, r := range results {
			proven = proven && r.Change == changeChanged && r.Result == "passed"
		}
		out["programming_proven"] = proven
		if len(unchanged) > 0 {
			out["note"] = fmt.Sprintf("unchanged: regions %v reported the golden id %q before programming already (the known-good image was there, or the id read is not the region's own, such as a DFL card's static region or a tool reading the base shell): the read-back shows the golden id, it does not prove that programming wrote anything", unchanged, want)
		}
	}
	if len(bad)+len(notReported) > 0 {
		out["result"] = "failed"
		mismatch := strings.Join(bad, "; ")
		reason := strings.Join(notReported, "; ")
		err := plugins.Errorf(plugins.CodePermanent, "step %s: read-back of %s after programming: want id %q, but %s: the card does not hold the golden image, so it is quarantined",
			t.Step, t.Device.Address, want, strings.Join(append(slices.Clip(bad), notReported...), "; "))
		return out, withDetails(err, map[string]any{plugins.VerificationKey: readbackVerification(want, plugins.VerifyFailed, mismatch, reason)})
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
	rb, err := readBack(ctx, be, t, want, regions, toolIDs, nil)
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
