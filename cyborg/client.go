// Package cyborg reads Cyborg's accelerator requests (ARQs): which device
// an instance was bound to and the attach handle Nova gave the guest.
// scourd reads them at bind, while they exist (Nova deletes an instance's
// ARQs when it releases its accelerators), to record which card a tenant
// had (docs/cyborg.md).
//
// What it sends and expects was read in openstack/cyborg (24e13c6):
// cyborg/api/controllers/v2/arqs.py (get_all), api/controllers/base.py
// (the version header), v2/versions.py (2.0 to 2.3), common/constants.py
// (ARQ states) and the api-ref samples.
package cyborg

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/scour-project/scour/hardware"
)

// ServiceType is Cyborg's service type in the Keystone catalog.
const ServiceType = "accelerator"

// Microversion is the API version scour asks for: 2.0, the first one,
// serves GET /v2/accelerator_requests with every field scour reads (2.1
// added project_id, which scour does not need). Cyborg reads it from
// "OpenStack-API-Version: accelerator 2.0", which gophercloud sends for
// a ServiceClient of type accelerator.
const Microversion = "2.0"

// ARQ states (cyborg/common/constants.py).
const (
	StateBound      = "Bound"
	StateBindFailed = "BindFailed"
	StateDeleting   = "Deleting"
)

// ARQ is one accelerator request as GET /v2/accelerator_requests lists
// it. Unbound fields are JSON null (empty here).
type ARQ struct {
	UUID             string            `json:"uuid"`
	State            string            `json:"state"`
	DeviceProfile    string            `json:"device_profile_name"`
	Hostname         string            `json:"hostname"`
	DeviceRPUUID     string            `json:"device_rp_uuid"`
	InstanceUUID     string            `json:"instance_uuid"`
	AttachHandleType string            `json:"attach_handle_type"`
	AttachHandleUUID string            `json:"attach_handle_uuid"`
	AttachHandleInfo map[string]string `json:"attach_handle_info"`
}

// PCIAddress is the PCI function the ARQ's attach handle names: for the
// PCI and TEST_PCI handle types, attach_handle_info's domain, bus,
// device and function (hex strings, as the conductor stores them from
// the driver's attach_info). An MDEV handle names no PCI function.
func (a ARQ) PCIAddress() (hardware.Address, error) {
	switch a.AttachHandleType {
	case "PCI", "TEST_PCI":
	default:
		return "", fmt.Errorf("ARQ %s: attach handle type %q names no PCI function (PCI or TEST_PCI expected)", a.UUID, a.AttachHandleType)
	}
	i := a.AttachHandleInfo
	addr, err := hardware.ParseAddress(fmt.Sprintf("%s:%s:%s.%s", i["domain"], i["bus"], i["device"], i["function"]))
	if err != nil {
		return "", fmt.Errorf("ARQ %s: attach_handle_info %v: %w", a.UUID, i, err)
	}
	return addr, nil
}

// ErrUnresolved means some ARQ of the instance is still being bound
// (Cyborg answers 423 to bind_state=resolved): ask again later.
var ErrUnresolved = errors.New("an accelerator request of the instance is not resolved yet")

// Dial returns a ServiceClient for Cyborg's API (placement.NewServiceClient
// with ServiceType). It is called again after a failure, so a Keystone or
// catalog outage at scourd's start only delays the ARQ records.
type Dial func(ctx context.Context) (*gophercloud.ServiceClient, error)

// Client reads ARQs. Safe for concurrent use.
type Client struct {
	dial    Dial
	timeout time.Duration

	mu sync.Mutex
	sc *gophercloud.ServiceClient
}

// New returns a client that dials on first use. timeout bounds one
// request (0: 30s).
func New(dial Dial, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return &Client{dial: dial, timeout: timeout}
}

func (c *Client) service(ctx context.Context) (*gophercloud.ServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sc != nil {
		return c.sc, nil
	}
	sc, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("cyborg: connect to the accelerator API: %w", err)
	}
	sc.Microversion = Microversion
	if sc.Type == "" {
		sc.Type = ServiceType
	}
	c.sc = sc
	return sc, nil
}

// InstanceARQs lists the instance's resolved ARQs:
// GET accelerator_requests?instance=<uuid>&bind_state=resolved. Cyborg
// answers 423 while one of them is still binding (ErrUnresolved). The
// list holds ARQs in state Bound, BindFailed or Deleting; callers use the
// Bound ones.
func (c *Client) InstanceARQs(ctx context.Context, instance string) ([]ARQ, error) {
	sc, err := c.service(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	q := url.Values{"instance": {instance}, "bind_state": {"resolved"}}
	u := strings.TrimRight(sc.Endpoint, "/") + "/accelerator_requests?" + q.Encode()
	var body struct {
		ARQs []ARQ `json:"arqs"`
	}
	_, err = sc.Get(ctx, u, &body, &gophercloud.RequestOpts{OkCodes: []int{http.StatusOK}})
	if gophercloud.ResponseCodeIs(err, http.StatusLocked) {
		return nil, fmt.Errorf("cyborg: instance %s: %w", instance, ErrUnresolved)
	}
	if err != nil {
		return nil, fmt.Errorf("cyborg: list the accelerator requests of instance %s at %s: %w (check the accelerator endpoint and that cyborg-api is up)", instance, sc.Endpoint, err)
	}
	out := body.ARQs[:0]
	for _, a := range body.ARQs {
		if a.InstanceUUID == instance { // Cyborg filters; a stray one is not this instance's
			out = append(out, a)
		}
	}
	return out, nil
}
