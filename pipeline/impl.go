package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/scour-project/scour/hardware"
	"github.com/scour-project/scour/plugins"
	"github.com/scour-project/scour/plugins/builtin"
)

// stepImpl is a built-in step or an executable plugin.
type stepImpl interface {
	// check returns why the device is unsupported ("" when supported)
	// without modifying it.
	check(ctx context.Context, r *run, s *Step, dev *hardware.Device) (string, error)
	exec(ctx context.Context, r *run, s *Step, dev *hardware.Device, progress func(float64)) (*plugins.Result, error)
}

func lookupBuiltin(name string) (builtin.Spec, bool) { return builtin.Lookup(name) }

func builtinNames() []string { return builtin.Names() }

func (e *Engine) impl(s *Step) stepImpl {
	if s.Type == TypePlugin {
		return pluginImpl{e.plugins}
	}
	spec, _ := lookupBuiltin(s.Type) // Validate refused unknown types
	return builtinImpl{spec}
}

type builtinImpl struct{ spec builtin.Spec }

func (builtinImpl) check(context.Context, *run, *Step, *hardware.Device) (string, error) {
	return "", nil
}

func (b builtinImpl) exec(ctx context.Context, r *run, s *Step, dev *hardware.Device, progress func(float64)) (*plugins.Result, error) {
	t := &builtin.Target{Device: dev, Step: s.Name, Args: s.Args, Progress: progress, Erased: r.lastErasure(),
		Earlier: succeededDetails(r.recs), Images: r.e.images, Retried: r.retried}
	if pr := r.e.plugins; pr != nil {
		t.RunPlugin = func(ctx context.Context, path string, args map[string]any, progress func(float64)) (*plugins.Result, error) {
			v, err := pr.Version(ctx, path)
			if err != nil {
				return nil, err
			}
			req, err := NewRequest(ctx, r.e.be, r.t, s.Name, args, dev, touchesMedia(s))
			if err != nil {
				return nil, err
			}
			return pr.Clean(ctx, path, v, req, progress)
		}
	}
	if *s.InDevice { // a host-bound step holds its slot already
		t.HostSlot = func(ctx context.Context) (func(), error) { return r.hostSlot(ctx, s) }
	}
	return b.spec.Run(ctx, r.e.be, t)
}

type pluginImpl struct{ pr PluginRunner }

func (p pluginImpl) version(ctx context.Context, s *Step) (string, error) {
	if p.pr == nil {
		return "", plugins.Errorf(plugins.CodeInvalidConfig, "step %s is a plugin but no plugin_dirs are configured", s.Name)
	}
	return p.pr.Version(ctx, s.Path)
}

func (p pluginImpl) check(ctx context.Context, r *run, s *Step, dev *hardware.Device) (string, error) {
	v, err := p.version(ctx, s)
	if err != nil {
		return "", err
	}
	req, _, err := r.request(ctx, s, dev)
	if err != nil {
		return "", err
	}
	_, err = p.pr.Check(ctx, s.Path, v, req)
	if plugins.CodeOf(err) == plugins.CodeUnsupported {
		return fmt.Sprintf("plugin %s CHECK: %s", s.Path, plugins.AsError(err).Msg), nil
	}
	return "", err
}

func (p pluginImpl) exec(ctx context.Context, r *run, s *Step, dev *hardware.Device, progress func(float64)) (*plugins.Result, error) {
	v, err := p.version(ctx, s)
	if err != nil {
		return nil, err
	}
	req, checked, err := r.request(ctx, s, dev)
	if err != nil {
		return nil, err
	}
	res, err := p.pr.Clean(ctx, s.Path, v, req, progress)
	if err != nil || res == nil || len(checked) == 0 {
		return res, err
	}
	// What the hidden-namespace check found goes into the record, as for
	// the built-in overwrite: scour's word, never the plugin's.
	details := maps.Clone(res.Details)
	if details == nil {
		details = map[string]any{}
	}
	maps.Copy(details, checked)
	out := *res
	out.Details = details
	return &out, nil
}

// request builds the plugin's stdin from local discovery and Placement
// facts the caller gave; nothing comes from a notification's content
// except the previous instance and project, passed as data, never to a
// shell.
func (r *run) request(ctx context.Context, s *Step, dev *hardware.Device) (*plugins.Request, map[string]any, error) {
	return newRequest(ctx, r.e.be, r.t, s.Name, s.Args, dev, touchesMedia(s))
}

// touchesMedia: the step writes or reads the device's media (destructive
// or verifying), so a media it cannot use fails it (NewRequest).
func touchesMedia(s *Step) bool { return *s.Destructive || s.verifies() }

// NewRequest builds a plugin request for dev (newRequest, without what
// the hidden-namespace check found).
func NewRequest(ctx context.Context, be hardware.Backend, t Target, step string, args map[string]any, dev *hardware.Device, media bool) (*plugins.Request, error) {
	req, _, err := newRequest(ctx, be, t, step, args, dev, media)
	return req, err
}

// newRequest builds a plugin request for dev. A backend that cannot list
// block devices for this kind of device (hardware.ErrUnsupported) gives
// the plugin no media; any other failure to list them is an error
// (code 11, retryable): the plugin must not run believing there is
// nothing to wipe.
//
// For a step that touches the media (media: destructive or verifying):
//   - a media of size 0 (a namespace whose LBA format the block layer
//     cannot use) is a permanent failure (code 12) naming it, as for the
//     built-in overwrite and verify: a plugin would wipe or read nothing
//     of it and could still answer ok;
//   - on an NVMe device, the hidden-namespace check of the built-in
//     overwrite runs first (hiddenNamespaces), and its details are
//     returned for the step's record: the media are only the namespaces
//     attached to the device's controller;
//   - an NVMe device whose namespaces cannot be listed
//     (hardware.ErrUnsupported: none attached) is no device without
//     media: the step fails permanently (code 12).
//
// Any other step (a firmware query, a reset) gets its media as listed,
// size 0 included, and runs; none when they cannot be listed.
func newRequest(ctx context.Context, be hardware.Backend, t Target, step string, args map[string]any, dev *hardware.Device, media bool) (*plugins.Request, map[string]any, error) {
	d := plugins.Device{Address: string(dev.Address), Kind: string(dev.Kind), VendorID: dev.VendorID,
		DeviceID: dev.DeviceID, Class: dev.Class, Driver: dev.Driver, Model: dev.Model, Serial: dev.Serial,
		Firmware: dev.Firmware, Absent: dev.Absent}
	if t.ResourceClass != "" {
		d.ResourceClasses = []string{t.ResourceClass}
	}
	if len(dev.Capabilities) > 0 {
		d.Capabilities = map[string]any{}
		for name, v := range dev.Capabilities {
			if v.Kind == hardware.KindBool {
				d.Capabilities[name] = v.Bool
			} else {
				d.Capabilities[name] = v.Items
			}
		}
	}
	if dev.NVMe != nil {
		d.Namespaces = dev.NVMe.Namespaces
	}
	nvmeMedia := media && dev.Kind == hardware.KindNVMe
	var checked map[string]any
	if nvmeMedia {
		var err error
		if checked, err = hiddenNamespaces(ctx, be, step, dev.Address); err != nil {
			return nil, nil, err
		}
	}
	listed, err := be.Media(ctx, dev.Address)
	switch {
	case err == nil:
	case nvmeMedia && errors.Is(err, hardware.ErrUnsupported):
		return nil, nil, plugins.Errorf(plugins.CodePermanent, "step %s not run (the plugin was not called): NVMe %s lists no namespace block device to wipe or read (%v): a plugin handed no media would touch nothing and could still answer ok, while the tenant's data may sit in namespaces detached from the controller; "+
			"attach them (nvme attach-ns) or erase the drive with an nvme-sanitize step, then release the device (scourctl placement unquarantine)", step, dev.Address, err)
	case !errors.Is(err, hardware.ErrUnsupported):
		return nil, nil, plugins.Errorf(plugins.CodeTryAgainLater, "step %s: cannot list the block devices of %s for the plugin: %v", step, dev.Address, err)
	}
	for _, m := range listed {
		if media && m.Size <= 0 {
			pe := builtin.EmptyMedia(dev.Address, m.Path)
			pe.Msg = fmt.Sprintf("step %s not run: %s", step, pe.Msg)
			return nil, nil, pe
		}
		d.Media = append(d.Media, plugins.Media{Path: m.Path, Size: m.Size})
	}
	req := &plugins.Request{Step: step, Device: d, Args: args,
		ResourceProvider: plugins.ResourceProvider{UUID: t.RPUUID, Name: t.RPName}}
	if t.PreviousInstance != "" || t.PreviousProject != "" {
		req.Previous = &plugins.Previous{Instance: t.PreviousInstance, Project: t.PreviousProject}
	}
	return req, checked, nil
}

// hiddenNamespaces makes, before a plugin step wipes or reads an NVMe
// device's media, the hidden-namespace check the built-in overwrite makes
// before writing a byte (builtin.HiddenNamespaces), and fails closed the
// same way without calling the plugin: the plugin is handed only the
// namespaces attached to the device's controller, so a namespace a
// tenant created, wrote and detached would keep its data behind the
// plugin's ok (and behind a verifying plugin's passed read-back). Such a
// namespace fails the step permanently (code 12: quarantine); a check
// that could not be made fails it as try-again-later (code 11: the device
// stays reserved, the step and the run are retried, then quarantined
// once the run budget is spent). It returns what was checked, for the
// record (nil where the backend cannot check).
func hiddenNamespaces(ctx context.Context, be hardware.Backend, step string, addr hardware.Address) (map[string]any, error) {
	checked, err := builtin.HiddenNamespaces(ctx, be, addr, "plugin step "+step)
	if err == nil {
		return checked, nil
	}
	pe := plugins.AsError(err)
	out := &plugins.Error{Code: plugins.CodeTryAgainLater, Details: maps.Clone(pe.Details),
		Msg: fmt.Sprintf("step %s not run (the plugin was not called): %s", step, pe.Msg)}
	var said *plugins.Error
	switch {
	case errors.Is(err, hardware.ErrHiddenNamespaces):
		out.Code = plugins.CodePermanent
	case !errors.As(err, &said):
		// The backend could not make the check (a tool, the driver; a
		// check it reports as not made says so itself): unknown is no
		// "none", and retrying may help.
		out.Msg += fmt.Sprintf("; whether the NVM subsystem of %s holds a namespace attached to no controller (a tenant's created-then-detached one, which the plugin cannot reach) could not be checked: the device stays reserved and this is retried. "+
			"If it persists, make `nvme list-ns --all` and `nvme list-ctrl -n` work for the drive (nvme-cli version, controller firmware; the step needs driver: nvme when the device lives on vfio-pci)", addr)
	}
	return nil, out
}

// succeededDetails are the details of the run's succeeded steps, oldest
// first.
func succeededDetails(recs []StepRecord) []map[string]any {
	var out []map[string]any
	for _, rec := range recs {
		if rec.State == StepSucceeded {
			out = append(out, rec.Details)
		}
	}
	return out
}

// lastErasure is what the run's last succeeded erasing step reported.
func (r *run) lastErasure() *builtin.Erasure {
	return lastErasure(r.recs)
}

func lastErasure(recs []StepRecord) *builtin.Erasure {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].State != StepSucceeded {
			continue
		}
		if e, ok := builtin.ErasureOf(recs[i].Details); ok {
			return e
		}
	}
	return nil
}

// pointless says why a built-in step is not worth running after the
// run's erasure (verify after a crypto erase), with details to record.
func pointless(impl stepImpl, s *Step, prior *builtin.Erasure) (string, map[string]any) {
	b, ok := impl.(builtinImpl)
	if !ok || b.spec.Skip == nil {
		return "", nil
	}
	return b.spec.Skip(s.Args, prior)
}
