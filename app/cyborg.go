package app

import (
	"context"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/scour-project/scour/cyborg"
	"github.com/scour-project/scour/handlers"
	"github.com/scour-project/scour/placement"
)

// accelerators implements handlers.Accelerators over cyborg.Client.
type accelerators struct{ c *cyborg.Client }

// newAccelerators is the Cyborg ARQ reader scourd wires when
// placement.cyborg reads ARQs, on Placement's Keystone session (the same
// token; Cyborg at placement.cyborg.endpoint or the catalog's accelerator
// endpoint); nil otherwise.
func newAccelerators(pc *placement.Client) handlers.Accelerators {
	cfg := pc.Config()
	if !cfg.Cyborg.ARQs() {
		return nil
	}
	timeout := cfg.RequestTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	return accelerators{cyborg.New(func(context.Context) (*gophercloud.ServiceClient, error) {
		return pc.ServiceClient(cyborg.ServiceType, cfg.Cyborg.Endpoint)
	}, timeout)}
}

func (a accelerators) InstanceARQs(ctx context.Context, instance string) ([]handlers.ARQ, error) {
	list, err := a.c.InstanceARQs(ctx, instance)
	if err != nil {
		return nil, err
	}
	out := make([]handlers.ARQ, 0, len(list))
	for _, q := range list {
		h := handlers.ARQ{UUID: q.UUID, State: q.State, Hostname: q.Hostname, DeviceRPUUID: q.DeviceRPUUID,
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
