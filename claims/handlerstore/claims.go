// Package handlerstore makes the claims store the notification handlers'
// claims store (handlers.Claims) for one host.
package handlerstore

import (
	"context"
	"errors"
	"time"

	"github.com/scour-project/scour/claims"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/hardware"
)

// Claims implements handlers.Claims on a claims.Store, scoped to Host.
type Claims struct {
	Store *claims.Store
	Host  string
}

var _ handlers.Claims = (*Claims)(nil)

func toStore(c handlers.Claim, host string) claims.Claim {
	out := claims.Claim{Host: host, Node: c.Node, InstanceUUID: c.InstanceUUID, ProjectID: c.ProjectID, UserID: c.UserID,
		VCPUs: c.VCPU, MemoryMB: c.MemoryMB, DiskGB: c.DiskGB, ResizeTarget: c.ResizeTarget, MessageID: c.MessageID,
		Volumes: claims.Volumes{RootDetached: c.Volumes.RootDetached}}
	for _, d := range c.Devices {
		out.PCI = append(out.PCI, claims.PCIDevice{RPUUID: d.RPUUID, RPName: d.RPName, Address: string(d.Address), ResourceClass: d.ResourceClass})
	}
	for _, v := range c.Volumes.Attached {
		out.Volumes.Attached = append(out.Volumes.Attached, claims.Volume{ID: v.ID, IsRoot: v.IsRoot})
	}
	return out
}

func fromStore(c claims.Claim) handlers.Claim {
	out := handlers.Claim{ID: c.ID, Host: c.Host, Node: c.Node, InstanceUUID: c.InstanceUUID, ProjectID: c.ProjectID, UserID: c.UserID,
		VCPU: c.VCPUs, MemoryMB: c.MemoryMB, DiskGB: c.DiskGB, ResizeTarget: c.ResizeTarget, State: handlers.ClaimState(c.State),
		MessageID: c.MessageID, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, Volumes: fromVolumes(c.Volumes)}
	for _, d := range c.PCI {
		out.Devices = append(out.Devices, handlers.ClaimDevice{RPUUID: d.RPUUID, RPName: d.RPName, Address: hardware.Address(d.Address), ResourceClass: d.ResourceClass})
	}
	return out
}

func fromVolumes(v claims.Volumes) handlers.Volumes {
	out := handlers.Volumes{RootDetached: v.RootDetached}
	for _, a := range v.Attached {
		out.Attached = append(out.Attached, handlers.Volume{ID: a.ID, IsRoot: a.IsRoot})
	}
	return out
}

func fromStoreAll(cs []claims.Claim, err error) ([]handlers.Claim, error) {
	if err != nil {
		return nil, err
	}
	out := make([]handlers.Claim, 0, len(cs))
	for _, c := range cs {
		out = append(out, fromStore(c))
	}
	return out, nil
}

func (s *Claims) RecordClaim(ctx context.Context, c handlers.Claim) error {
	_, err := s.Store.RecordClaim(ctx, toStore(c, s.Host))
	return err
}

func (s *Claims) ClaimsForInstance(ctx context.Context, instance string) ([]handlers.Claim, error) {
	return fromStoreAll(s.Store.ClaimsForInstance(ctx, s.Host, instance))
}

func (s *Claims) ReleaseClaim(ctx context.Context, instance string, resizeTarget bool, reason, messageID string) error {
	_, err := s.Store.ReleaseResizeClaim(ctx, s.Host, instance, resizeTarget, reason, messageID)
	return err
}

func (s *Claims) MarkDormant(ctx context.Context, instance, messageID string) error {
	_, err := s.Store.MarkDormant(ctx, s.Host, instance, messageID)
	return err
}

func (s *Claims) Reactivate(ctx context.Context, instance, messageID string) error {
	_, err := s.Store.Reactivate(ctx, s.Host, instance, messageID)
	return err
}

// UpdateVolumes applies fn in one store transaction; no live claim is a
// no-op, as handlers.Claims specifies. Fields the handlers do not see
// (a volume's device name) survive for volumes fn keeps.
func (s *Claims) UpdateVolumes(ctx context.Context, instance string, fn func(*handlers.Volumes)) error {
	err := s.Store.UpdateVolumes(ctx, s.Host, instance, func(v *claims.Volumes) error {
		device := map[string]string{}
		for _, a := range v.Attached {
			device[a.ID] = a.Device
		}
		hv := fromVolumes(*v)
		fn(&hv)
		v.RootDetached, v.Attached = hv.RootDetached, v.Attached[:0]
		for _, a := range hv.Attached {
			v.Attached = append(v.Attached, claims.Volume{ID: a.ID, IsRoot: a.IsRoot, Device: device[a.ID]})
		}
		return nil
	})
	if errors.Is(err, claims.ErrNoClaim) {
		return nil
	}
	return err
}

func (s *Claims) LiveClaims(ctx context.Context) ([]handlers.Claim, error) {
	return fromStoreAll(s.Store.LiveClaims(ctx, s.Host))
}

func (s *Claims) SweepOrphans(ctx context.Context, backed func(ctx context.Context, instance string) (bool, error)) (int, error) {
	orphaned, err := s.Store.SweepOrphans(ctx, s.Host, backed)
	return len(orphaned), err
}

func (s *Claims) SawHolder(ctx context.Context, rpUUID, consumer string) error {
	return s.Store.SawHolder(ctx, s.Host, rpUUID, consumer)
}

// SawHolderAt implements handlers.Claims.
func (s *Claims) SawHolderAt(ctx context.Context, rpUUID, consumer string, at time.Time) error {
	return s.Store.SawHolderAt(ctx, s.Host, rpUUID, consumer, at)
}

func (s *Claims) PreviousTenant(ctx context.Context, rpUUID string) (handlers.Tenant, bool, error) {
	t, ok, err := s.Store.PreviousTenant(ctx, s.Host, rpUUID)
	if err != nil || !ok {
		return handlers.Tenant{}, false, err
	}
	if t.Project == claims.UnknownTenant {
		t.Project = "" // the handlers' word for unknown
	}
	return handlers.Tenant{Instance: t.Instance, Project: t.Project, DeviceRP: t.DeviceRP}, true, nil
}

func (s *Claims) WipeRetirementIfUsed(ctx context.Context, rpUUID string) (handlers.Tenant, bool, error) {
	t, changed, err := s.Store.WipeRetirementIfUsed(ctx, s.Host, rpUUID)
	if err != nil || !changed {
		return handlers.Tenant{}, false, err
	}
	if t.Project == claims.UnknownTenant {
		t.Project = ""
	}
	return handlers.Tenant{Instance: t.Instance, Project: t.Project, DeviceRP: t.DeviceRP}, true, nil
}

func (s *Claims) SawAddress(ctx context.Context, rpUUID string, addr hardware.Address) error {
	return s.Store.SawAddress(ctx, s.Host, rpUUID, string(addr))
}

var (
	_ handlers.QuarantineLister = (*Claims)(nil)
	_ handlers.RetirementWiper  = (*Claims)(nil)
)

// OpenQuarantines lists the host's unreleased quarantines and retirements.
func (s *Claims) OpenQuarantines(ctx context.Context) (map[string]handlers.OpenQuarantine, error) {
	open, err := s.Store.OpenQuarantines(ctx, s.Host)
	if err != nil {
		return nil, err
	}
	out := make(map[string]handlers.OpenQuarantine, len(open))
	for _, q := range open {
		out[q.DeviceRP] = handlers.OpenQuarantine{Reason: q.Reason, Retired: q.Retired(), Wipe: q.Wipe != "", Address: hardware.Address(q.Address)}
	}
	return out, nil
}

func (s *Claims) ReattachQuarantine(ctx context.Context, from, to string, addr hardware.Address) (bool, error) {
	return s.Store.ReattachQuarantine(ctx, s.Host, from, to, string(addr))
}

func (s *Claims) NoteDeleted(ctx context.Context, instance, messageID string) error {
	return s.Store.NoteDeleted(ctx, s.Host, instance, messageID)
}

func (s *Claims) Deleted(ctx context.Context, instance string) (bool, error) {
	return s.Store.Deleted(ctx, s.Host, instance)
}
