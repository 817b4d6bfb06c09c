package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/scour-project/scour/placement"
	"log/slog"
	"slices"

	"github.com/scour-project/scour/cyborg"
	"github.com/scour-project/scour/hardware"
)

// ARQ is what the handlers read of one Cyborg accelerator request of an
// instance (cyborg.ARQ through app).
type ARQ struct {
	UUID             string
	State            string // Bound, BindFailed, Deleting (resolved states)
	Hostname         string
	DeviceRPUUID     string
	AttachHandleType string
	// Address is the PCI function of the attach handle; "" with
	// AddressErr when the handle names none (an MDEV handle, a malformed
	// attach_handle_info).
	Address    hardware.Address
	AddressErr string
}

// ARQBound is Cyborg's state of an ARQ bound to a device.
const ARQBound = "Bound"

// Accelerators reads Cyborg's accelerator requests.
type Accelerators interface {
	// InstanceARQs lists the instance's resolved ARQs. An error (Cyborg
	// unreachable, an ARQ still binding) means: ask again later.
	InstanceARQs(ctx context.Context, instance string) ([]ARQ, error)
}

// ARQRecord is what scour keeps of an instance's ARQ for one device:
// Nova deletes the ARQs when it releases the accelerators, and the API
// then no longer says which card and attach handle the tenant had.
type ARQRecord struct {
	Instance         string
	DeviceRP         string // a device of this host's tree, or the ARQ's device_rp_uuid on a mismatch
	ARQ              string
	ARQDeviceRP      string
	ARQHostname      string
	AttachHandleType string
	Address          hardware.Address
	Agree            bool
	Detail           string // why not, on a mismatch
}

// ARQStore is an optional Claims capability: ARQ records, kept once.
type ARQStore interface {
	RecordARQ(ctx context.Context, r ARQRecord) error
	// ARQRecorded says whether the instance has a record for the device.
	ARQRecorded(ctx context.Context, instance, rpUUID string) (bool, error)
}

// arqs records, at bind and in the scans until it succeeds, the ARQ of
// each Cyborg device an instance holds on this host, after checking it
// (safety rule 3): the ARQ's device_rp_uuid must be a Cyborg device of
// this host's tree that Placement shows the instance holding, its
// hostname this host, its attach handle that device's PCI address, and
// local discovery must find that function. An ARQ that disagrees touches
// nothing (no write, no clean, nothing fenced on its word): it is
// recorded as a mismatch, logged at WARN and counted. The fence itself
// never waits for Cyborg: it comes from Placement's allocations alone.
type arqs struct {
	acc   Accelerators
	store ARQStore
	hw    Hardware
	cfg   Config
	m     *metrics
}

func newARQs(cfg Config, d Deps, m *metrics) *arqs {
	store, ok := d.Claims.(ARQStore)
	if d.Accelerators == nil || !ok {
		return nil
	}
	return &arqs{acc: d.Accelerators, store: store, hw: d.Hardware, cfg: cfg, m: m}
}

// record reads and records the instance's ARQs for the Cyborg devices of
// held (this host's devices Placement shows it holding) that have no
// record yet. An error leaves them to the next scan.
func (a *arqs) record(ctx context.Context, log *slog.Logger, instance string, held []Device) error {
	if a == nil {
		return nil
	}
	var todo []Device
	for _, d := range held {
		if !d.Cyborg || d.State == placement.StateUnmanaged {
			continue
		}
		done, err := a.store.ARQRecorded(ctx, instance, d.RPUUID)
		if err != nil {
			return fmt.Errorf("instance %s device %s: read its Cyborg ARQ record: %w (retried at the next scan; check the claims database)", instance, d.RPName, err)
		}
		if !done {
			todo = append(todo, d)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	list, err := a.acc.InstanceARQs(ctx, instance)
	if err != nil {
		a.m.arqs.WithLabelValues("error").Inc()
		return fmt.Errorf("instance %s: read its Cyborg accelerator requests: %w (the card is fenced from Placement's allocations regardless; which attach handle the tenant got is recorded at a later scan)", instance, err)
	}
	var errs []error
	for _, q := range list {
		if q.State != ARQBound {
			continue
		}
		if done, _ := a.store.ARQRecorded(ctx, instance, q.DeviceRPUUID); done {
			continue
		}
		r, err := a.check(ctx, instance, q, todo)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := a.store.RecordARQ(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w (retried at the next scan)", instance, err))
			continue
		}
		if r.Agree {
			a.m.arqs.WithLabelValues("agree").Inc()
			log.Info("Cyborg ARQ recorded", "instance", instance, "arq", q.UUID, "device_rp", q.DeviceRPUUID, "attach_handle", q.Address)
			continue
		}
		a.m.arqs.WithLabelValues("mismatch").Inc()
		log.Warn("Cyborg ARQ disagrees with this host's Placement tree or hardware; nothing touched on its word (check the ARQ in Cyborg and the device in Placement)",
			"instance", instance, "arq", q.UUID, "arq_device_rp", q.DeviceRPUUID, "arq_hostname", q.Hostname,
			"attach_handle", cmp.Or(string(q.Address), q.AddressErr), "why", r.Detail)
	}
	return errors.Join(errs...)
}

// check compares one bound ARQ with held and local discovery.
func (a *arqs) check(ctx context.Context, instance string, q ARQ, held []Device) (ARQRecord, error) {
	r := ARQRecord{Instance: instance, DeviceRP: q.DeviceRPUUID, ARQ: q.UUID, ARQDeviceRP: q.DeviceRPUUID,
		ARQHostname: q.Hostname, AttachHandleType: q.AttachHandleType, Address: q.Address}
	i := slices.IndexFunc(held, func(d Device) bool { return d.RPUUID == q.DeviceRPUUID })
	switch {
	case i < 0:
		r.Detail = fmt.Sprintf("device_rp_uuid %s is no Cyborg device of host %s's Placement tree that the instance holds", q.DeviceRPUUID, a.cfg.Host)
	case q.Hostname != "" && q.Hostname != a.cfg.Host && q.Hostname != a.cfg.Node:
		r.Detail = fmt.Sprintf("the ARQ is bound on host %q, not %s", q.Hostname, a.cfg.Host)
	case q.Address == "":
		r.Detail = "the attach handle names no PCI function: " + q.AddressErr
	case q.Address != held[i].Address:
		r.Detail = fmt.Sprintf("the attach handle %s is not device %s's PCI address %s", q.Address, held[i].RPName, held[i].Address)
	default:
		ok, err := a.hw.Present(ctx, q.Address)
		if err != nil {
			return r, fmt.Errorf("instance %s ARQ %s: look up attach handle %s on this host: %w (retried at the next scan)", instance, q.UUID, q.Address, err)
		}
		if !ok {
			r.Detail = fmt.Sprintf("local discovery finds no PCI function %s on this host", q.Address)
			break
		}
		r.Agree = true
	}
	return r, nil
}

// recordARQs completes, for each consumer Placement shows holding Cyborg
// devices of this host, the ARQ records the bind did not write (Cyborg
// was unreachable, the bind's notification was lost).
func (r *Reconciler) recordARQs(ctx context.Context, devs []Device) error {
	if r.arq == nil {
		return nil
	}
	held := map[string][]Device{}
	var order []string
	for _, d := range devs {
		if !d.Cyborg || !d.InUse() {
			continue
		}
		for _, c := range d.Consumers {
			if _, ok := held[c]; !ok {
				order = append(order, c)
			}
			held[c] = append(held[c], d)
		}
	}
	var errs []error
	for _, c := range order {
		errs = append(errs, r.arq.record(ctx, r.log, c, held[c]))
	}
	return errors.Join(errs...)
}

// CyborgLister is what CyborgARQs reads of Cyborg (cyborg.Client).
type CyborgLister interface {
	InstanceARQs(ctx context.Context, instance string) ([]cyborg.ARQ, error)
}

// CyborgARQs is Accelerators over Cyborg's API: each resolved ARQ of the
// instance with the PCI function its attach handle names, or, in
// AddressErr, why it names none (an MDEV handle, malformed
// attach_handle_info).
type CyborgARQs struct{ Cyborg CyborgLister }

func (a CyborgARQs) InstanceARQs(ctx context.Context, instance string) ([]ARQ, error) {
	list, err := a.Cyborg.InstanceARQs(ctx, instance)
	if err != nil {
		return nil, err
	}
	out := make([]ARQ, 0, len(list))
	for _, q := range list {
		h := ARQ{UUID: q.UUID, State: q.State, Hostname: q.Hostname, DeviceRPUUID: q.DeviceRPUUID,
			AttachHandleType: q.AttachHandleType}
		if addr, err := q.PCIAddress(); err != nil {
			h.AddressErr = err.Error()
		} else {
			h.Address = addr
		}
		out = append(out, h)
	}
	return out, nil
}
