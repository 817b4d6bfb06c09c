package builtin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
)

// Erasure is what the last erasing step of a run reported: the technique
// that actually ran and what a read-back should find after it.
type Erasure struct {
	ID     string // plugins.EraseKey: "sanitize-crypto", "format-ses1", "overwrite", ...
	Expect string // "0x00".."0xff", or plugins.ExpectNone
	// Technique is the record's wording (plugins.TechniqueKey).
	Technique string
	// Samples are blocks read just before a crypto erase (verify checks
	// they changed); Sampled says the erase sampled some (or a
	// prediction expects it to). SamplesLost: the step's record says
	// blocks were sampled, but they are not in it (dropped for size by
	// the claims store): verify must fail, never skip. SampleError: some
	// media could not be sampled (why; verify must fail, never skip nor
	// pass on the others).
	Samples     []BlockSample
	Sampled     bool
	SamplesLost bool
	SampleError string
}

// truncatedKeysKey is where the claims store names the details keys it
// dropped to keep a step's details under its size limit.
const truncatedKeysKey = "truncated_keys"

// ErasureOf reads an Erasure out of a step's details (false when the step
// reported none).
func ErasureOf(details map[string]any) (*Erasure, bool) {
	id, _ := details[plugins.EraseKey].(string)
	exp, _ := details[plugins.ExpectKey].(string)
	if id == "" || exp == "" {
		return nil, false
	}
	tech, _ := details[plugins.TechniqueKey].(string)
	e := &Erasure{ID: id, Expect: exp, Technique: tech, Samples: samplesOf(details)}
	// A count the samples do not match, or a store that says it dropped
	// them (a record of a scourd that stored no count), is evidence lost.
	n, _ := argInt(details, plugins.SampledKey, 0)
	truncated, _ := details[truncatedKeysKey].([]any)
	e.SamplesLost = int(n) > len(e.Samples) || slices.Contains(truncated, any(preEraseKey))
	e.SampleError, _ = details[plugins.SampleErrorKey].(string)
	if e.SampleError == "" && slices.Contains(truncated, any(plugins.SampleErrorKey)) {
		e.SampleError = "why some media could not be sampled was dropped from the stored record"
	}
	e.Sampled = len(e.Samples) > 0 || e.SamplesLost || e.SampleError != ""
	return e, true
}

// withSamples reads, just before a technique that leaves noise runs, the
// blocks verify will check afterwards (see sample.go). Media that could
// not be sampled do not stop the erase (a pipeline without a verify
// relies on the controller's completion alone), but their error goes
// into the step's details (plugins.SampleErrorKey) and fails the verify
// after it: the data of a namespace nobody could read before the erase
// is no "nothing to sample".
func withSamples(ctx context.Context, be hardware.Backend, dev *hardware.Device, e Erasure) Erasure {
	if e.Expect != plugins.ExpectNone {
		return e
	}
	var err error
	e.Samples, err = sampleMedia(ctx, be, dev)
	if err != nil {
		e.SampleError = bounded(err.Error(), maxSampleError)
	}
	e.Sampled = len(e.Samples) > 0 || e.SampleError != ""
	return e
}

// erased is the result of an erasing step: details plus what ran, in
// words and as an id, and what a read-back should find.
func erased(e Erasure, details map[string]any) *plugins.Result {
	if details == nil {
		details = map[string]any{}
	}
	details[plugins.EraseKey], details[plugins.ExpectKey], details[plugins.TechniqueKey] = e.ID, e.Expect, e.Technique
	if len(e.Samples) > 0 {
		details[preEraseKey] = e.Samples
	}
	if e.Expect == plugins.ExpectNone {
		details[plugins.SampledKey] = len(e.Samples)
	}
	if e.SampleError != "" {
		details[plugins.SampleErrorKey] = e.SampleError
	}
	return plugins.OK(details)
}

func hexByte(b byte) string { return fmt.Sprintf("0x%02x", b) }

// sanitizeErasure: a crypto erase leaves noise; block erase and overwrite
// leave zeros on the drives scour supports (deallocated blocks reading as
// zeros, DLFEAT 001b; nvme-cli's overwrite pattern 0). A drive that reads
// otherwise fails verify visibly, never silently.
func sanitizeErasure(a hardware.SanitizeAction) Erasure {
	e := Erasure{ID: "sanitize-" + string(a), Expect: hexByte(0), Technique: "NVMe Sanitize, " + sanitizeTechnique[a]}
	if a == hardware.SanitizeCrypto {
		e.Expect = plugins.ExpectNone
	}
	return e
}

func formatErasure(ses int) Erasure {
	if ses == 2 {
		return Erasure{ID: "format-ses2", Expect: plugins.ExpectNone, Technique: "NVMe Format NVM, SES=2 (cryptographic erase)"}
	}
	return Erasure{ID: "format-ses1", Expect: hexByte(0), Technique: "NVMe Format NVM, SES=1 (user data erase)"}
}

func init() {
	register(Spec{
		Name:        "nvme-erase",
		InDevice:    true,
		Destructive: true,
		Needs:       nvmeDriver,
		Tools:       nvmeCLI,
		Does: "the strongest erase the controller offers: nvme sanitize (by sanicap: crypto > block > overwrite), else nvme format -s 2|1 (by oacs/fna), " +
			"else an O_DIRECT zero overwrite of every namespace; the record names the technique that ran",
		Run: eraseStep,
		CheckArgs: func(a map[string]any) error {
			_, err1 := argBool(a, "crypto", true)
			_, err2 := argBool(a, "allow_overwrite", true)
			_, err3 := argDuration(a, "poll", 0)
			return errors.Join(onlyArgs(a, "crypto", "allow_overwrite", "poll"), err1, err2, err3)
		},
	})
}

// eraseStep falls back sanitize > format > overwrite. It moves to the next
// technique only when the current one was refused before it touched the
// device (ErrUnsupported from the capability check); a technique that
// started and failed fails the step: the device may be half erased and a
// weaker technique must not paper over that. A sanitize is refused on an
// NVM subsystem shared with other controllers (it would erase their
// namespaces) unless hardware.allow_subsystem_sanitize lists the device;
// so is a format whose id-ctrl fna says it reaches every namespace of the
// subsystem (bit 0; bit 1 with a secure erase, which scour always asks):
// SubsystemFormatRefusal, same predicate and allowance. The format or
// overwrite that replaces a refused sanitize must have made the
// hidden-namespace check (hiddenUnchecked: a check that could not be made
// fails closed, retried later).
func eraseStep(ctx context.Context, be hardware.Backend, t *Target) (*plugins.Result, error) {
	crypto, err := argBool(t.Args, "crypto", true)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	allowOverwrite, err := argBool(t.Args, "allow_overwrite", true)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	poll, err := argDuration(t.Args, "poll", 5*time.Second)
	if err != nil {
		return nil, plugins.Errorf(plugins.CodeInvalidConfig, "%v", err)
	}
	d := t.Device
	var notUsed []string
	start := time.Now()

	// Unknown controller facts are no "not supported": never fall back
	// from them.
	action, ok, err := pickSanitize(d, crypto)
	if err != nil {
		return nil, err
	}
	// A sanitize erases the whole NVM subsystem: on one shared with other
	// controllers only the device's own namespaces may be erased.
	shared := hardware.SubsystemSanitizeRefusal(d.Address, d.NVMe)
	if ok && shared != nil {
		notUsed = append(notUsed, fmt.Sprintf("sanitize %s refused: %v", action, shared))
	} else if ok {
		e := withSamples(ctx, be, d, sanitizeErasure(action))
		err := be.Sanitize(ctx, d.Address, action, poll, t.progress)
		if err == nil {
			t.progress(1)
			return erased(e,
				map[string]any{"action": string(action), ScopeKey: SanitizeScope, "not_used": notUsed, "seconds": time.Since(start).Seconds()}), nil
		}
		if !errors.Is(err, hardware.ErrUnsupported) {
			return nil, fmt.Errorf("sanitize (%s) of NVMe %s: %w", action, d.Address, err)
		}
		if errors.Is(err, hardware.ErrSharedSubsystem) {
			shared = err
		}
		notUsed = append(notUsed, fmt.Sprintf("sanitize %s refused: %v", action, err))
	} else {
		notUsed = append(notUsed, noSanitizeWhy(d, crypto))
	}
	// With the sanitize refused for sharing, the format or overwrite that
	// replaces it must not run, and never report clean, unless the
	// hidden-namespace check was really made: a tenant's detached namespace
	// is reached by neither.
	if shared != nil {
		if _, err := checkHidden(ctx, be, d.Address, "erase", shared); err != nil {
			return nil, err
		}
	}

	canFormat, err := formatSupported(d)
	if err != nil {
		return nil, err
	}
	formatRefused := hardware.SubsystemFormatRefusal(d.Address, d.NVMe, formatSES(d, crypto))
	switch {
	case !canFormat:
		notUsed = append(notUsed, "format: controller does not support Format NVM (oacs bit 1 clear)")
	case d.NVMe == nil || len(d.NVMe.Namespaces) == 0:
		notUsed = append(notUsed, fmt.Sprintf("format: no namespace block devices (bound to %q)", d.Driver))
	case formatRefused != nil:
		notUsed = append(notUsed, fmt.Sprintf("format refused: %v", formatRefused))
	default:
		ses := formatSES(d, crypto)
		e := withSamples(ctx, be, d, formatErasure(ses))
		details := map[string]any{"ses": ses, "namespaces": d.NVMe.Namespaces}
		for i, ns := range d.NVMe.Namespaces {
			err := formatNS(ctx, be, d.Address, ns, ses, details)
			if err != nil && i == 0 && errors.Is(err, hardware.ErrUnsupported) {
				notUsed = append(notUsed, fmt.Sprintf("format -s %d refused: %v", ses, err))
				break
			}
			if err != nil {
				return nil, fmt.Errorf("format -s %d of %s on NVMe %s: %w", ses, ns, d.Address, err)
			}
			if err := hiddenUnchecked(d.Address, details, shared); err != nil {
				return nil, err
			}
			t.progress(float64(i+1) / float64(len(d.NVMe.Namespaces)))
			if i == len(d.NVMe.Namespaces)-1 {
				details["not_used"], details["seconds"] = notUsed, time.Since(start).Seconds()
				return erased(e, details), nil
			}
		}
	}

	if !allowOverwrite && shared != nil {
		return nil, &plugins.Error{Code: plugins.CodePermanent, Details: map[string]any{"not_used": notUsed},
			Msg: fmt.Sprintf("NVMe %s: no safe erase: a sanitize would reach the other controllers of its shared NVM subsystem, format is not available and args.allow_overwrite is false: nothing was erased; "+
				"allow the overwrite (args.allow_overwrite: true), or erase the drive with every controller of its subsystem out of use and list it in hardware.allow_subsystem_sanitize, then release the device (%v)", d.Address, notUsed)}
	}
	if !allowOverwrite {
		return nil, &plugins.Error{Code: plugins.CodeUnsupported, Details: map[string]any{"not_used": notUsed},
			Msg: fmt.Sprintf("NVMe %s: neither sanitize nor format is available and args.allow_overwrite is false: nothing was erased (%v)", d.Address, notUsed)}
	}
	// The overwrite streams the whole drive through the host: it takes a
	// host-bound slot as the overwrite step does.
	if t.HostSlot != nil {
		release, err := t.HostSlot(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	o, _ := mediaArgs(nil, false)
	res, err := overwriteAll(ctx, be, t, o)
	if err != nil {
		return nil, err
	}
	res.Details["not_used"] = notUsed
	return res, nil
}

// hiddenUnchecked fails closed, as try-again-later (the device stays
// reserved), when the backend says the hidden-namespace check could not
// be made (hardware.HiddenNamespacesCheckedKey false): a format or
// overwrite reaches only this controller's namespaces, and a tenant's
// created-then-detached one would survive it behind a clean record.
// shared is why a sanitize was refused for a shared subsystem (nil when
// none was), for the message.
func hiddenUnchecked(addr hardware.Address, details map[string]any, shared error) error {
	if details[hardware.HiddenNamespacesCheckedKey] != false {
		return nil
	}
	what, fix := "a format or overwrite through this controller reaches only its namespaces", ""
	if shared != nil {
		what = fmt.Sprintf("its sanitize was refused (%v), and the format or overwrite replacing it reaches only this controller's namespaces", shared)
		fix = fmt.Sprintf(" and, with every controller of the subsystem out of use, list %s in hardware.allow_subsystem_sanitize", addr)
	}
	return &plugins.Error{Code: plugins.CodeTryAgainLater, Details: maps.Clone(details),
		Msg: fmt.Sprintf("NVMe %s: %s, but whether the subsystem holds a namespace attached to no controller (a tenant's created-then-detached one) could not be checked (%v): the device is not called clean and stays reserved; this is retried. "+
			"If it persists, make `nvme list-ns --all` and `nvme list-ctrl -n` work for the drive (nvme-cli version, controller firmware), or delete or attach such namespaces%s",
			addr, what, details[hardware.HiddenNamespacesNoteKey], fix)}
}

// pickSanitize is the best sanitize action the controller supports,
// crypto only when allowed; an error when its support is unknown.
func pickSanitize(d *hardware.Device, crypto bool) (hardware.SanitizeAction, bool, error) {
	have, err := sanitizeMethods(d)
	if err != nil {
		return "", false, err
	}
	for i := len(hardware.SanitizeScale) - 1; i >= 0; i-- {
		m := hardware.SanitizeScale[i]
		if m == string(hardware.SanitizeCrypto) && !crypto {
			continue
		}
		for _, h := range have {
			if h == m {
				return hardware.SanitizeAction(m), true, nil
			}
		}
	}
	return "", false, nil
}

// noSanitizeWhy words, for not_used, why no sanitize action was picked
// from the controller's known support.
func noSanitizeWhy(d *hardware.Device, crypto bool) string {
	if have, _ := sanitizeMethods(d); len(have) > 0 && !crypto {
		return fmt.Sprintf("sanitize: the controller offers only %v and args.crypto is false", have)
	}
	return "sanitize: the controller reports no sanitize action (id-ctrl sanicap has none of crypto, block, overwrite)"
}

// PredictErasure says which erasure step type with args would perform on
// dev, from the same choices the step makes at run time, for dry runs.
// False when the step erases nothing or dev's controller facts are
// unknown (an NVMe on vfio-pci never seen on nvme by this process).
func PredictErasure(stepType string, args map[string]any, dev *hardware.Device) (*Erasure, bool) {
	if stepType == "overwrite" {
		o, err := mediaArgs(args, false)
		if err != nil {
			return nil, false
		}
		return &Erasure{ID: "overwrite", Expect: hexByte(o.Pattern)}, true
	}
	n := dev.NVMe
	known := n != nil && ((n.Controller != "" && !n.BoundToVFIO) || n.Remembered)
	if !known {
		return nil, false
	}
	if idCtrlUnknown(dev, "") != nil {
		return nil, false
	}
	crypto, _ := argBool(args, "crypto", true)
	switch stepType {
	case "nvme-sanitize":
		forced, _ := argString(args, "action", "")
		a, err := chooseSanitize(dev, forced)
		if err != nil {
			return nil, false
		}
		e := sanitizeErasure(a)
		return predicted(e), true
	case "nvme-format":
		if hardware.SubsystemFormatRefusal(dev.Address, dev.NVMe, formatSES(dev, crypto)) != nil {
			return nil, false
		}
		return predicted(formatErasure(formatSES(dev, crypto))), true
	case "nvme-erase":
		if a, ok, _ := pickSanitize(dev, crypto); ok && hardware.SubsystemSanitizeRefusal(dev.Address, dev.NVMe) == nil {
			return predicted(sanitizeErasure(a)), true
		}
		if ok, _ := formatSupported(dev); ok && hardware.SubsystemFormatRefusal(dev.Address, dev.NVMe, formatSES(dev, crypto)) == nil {
			return predicted(formatErasure(formatSES(dev, crypto))), true
		}
		return &Erasure{ID: "overwrite", Expect: hexByte(0)}, true
	}
	return nil, false
}

// Erases reports whether a built-in step type erases media (and reports
// an Erasure).
func Erases(stepType string) bool {
	switch stepType {
	case "overwrite", "nvme-sanitize", "nvme-format", "nvme-erase":
		return true
	}
	return false
}

// predicted marks a predicted crypto erasure as sampled: the step reads
// its samples at run time.
func predicted(e Erasure) *Erasure {
	e.Sampled = e.Expect == plugins.ExpectNone
	return &e
}
