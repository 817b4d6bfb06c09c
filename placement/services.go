package placement

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
)

// ServiceClient returns a client of another OpenStack service of this
// cloud (serviceType: "image" for Glance, "accelerator" for Cyborg) on
// c's own Keystone session: the same token, re-authenticated once for
// Placement and every other service when it expires or is revoked, and
// the same TLS settings. Its endpoint is endpoint when set (the catalog is
// not consulted), else the catalog's for serviceType in Placement's
// region and interface (placement.region/interface, OS_REGION_NAME,
// OS_INTERFACE). With a static token (placement.token: no Keystone, no
// catalog) endpoint is required, and the token is sent to that service
// too. It sends nothing: the catalog is the one of c's token.
func (c *Client) ServiceClient(serviceType, endpoint string) (*gophercloud.ServiceClient, error) {
	pc := c.sc.ProviderClient
	if endpoint != "" {
		return serviceAt(pc, serviceType, endpoint), nil
	}
	if c.cfg.Token != "" {
		return nil, fmt.Errorf("%s client: placement.token is a static token, so there is no service catalog to find the %s service in: set its endpoint (%s)", serviceType, serviceType, endpointKey(serviceType))
	}
	var t *tls.Config
	_, eo, err := keystoneOptions(c.cfg, &t, c.getenv)
	if err != nil {
		return nil, err
	}
	return serviceFromCatalog(pc, eo, serviceType)
}

// NewServiceClient authenticates with Placement's credentials and TLS
// settings (cfg: a static token, a clouds.yaml entry or the OS_*
// variables; getenv nil means os.Getenv) and returns a client of another
// OpenStack service of this cloud on a Keystone session of its own, as
// Client.ServiceClient does on Placement's: for a caller without a
// Placement client (scourd itself uses Client.ServiceClient, one session
// for every service).
func NewServiceClient(ctx context.Context, cfg Config, serviceType, endpoint string, getenv func(string) string) (*gophercloud.ServiceClient, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg.setDefaults()
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Token != "" {
		if endpoint == "" {
			return nil, fmt.Errorf("%s client: placement.token is a static token, so there is no service catalog to find the %s service in: set its endpoint (%s)", serviceType, serviceType, endpointKey(serviceType))
		}
		pc := &gophercloud.ProviderClient{HTTPClient: httpClient(tlsCfg)}
		pc.SetToken(cfg.Token)
		return serviceAt(pc, serviceType, endpoint), nil
	}
	ao, eo, err := keystoneOptions(cfg, &tlsCfg, getenv)
	if err != nil {
		return nil, err
	}
	ao.AllowReauth = true
	pc, err := openstack.NewClient(ao.IdentityEndpoint)
	if err != nil {
		return nil, fmt.Errorf("%s client: identity endpoint %q: %w", serviceType, ao.IdentityEndpoint, err)
	}
	pc.HTTPClient = httpClient(tlsCfg)
	if err := openstack.Authenticate(ctx, pc, ao); err != nil {
		return nil, &RecoverableError{Err: fmt.Errorf("%s client: auth against %s: %w (check credentials and that Keystone is reachable)", serviceType, ao.IdentityEndpoint, err)}
	}
	if endpoint != "" {
		return serviceAt(pc, serviceType, endpoint), nil
	}
	return serviceFromCatalog(pc, eo, serviceType)
}

// serviceFromCatalog finds serviceType's endpoint in the catalog of pc's
// token for eo's region and interface.
func serviceFromCatalog(pc *gophercloud.ProviderClient, eo gophercloud.EndpointOpts, serviceType string) (*gophercloud.ServiceClient, error) {
	eo.ApplyDefaults(serviceType)
	url, err := pc.EndpointLocator(eo)
	if err != nil {
		return nil, fmt.Errorf("%s endpoint from the service catalog: %w", serviceType, catalogError(pc, eo, err))
	}
	return serviceAt(pc, serviceType, url), nil
}

// serviceAt is a client of serviceType at endpoint on pc's session. The
// image service's resources are under v2/ (the catalog lists Glance
// unversioned, as gophercloud's NewImageV2 expects).
func serviceAt(pc *gophercloud.ProviderClient, serviceType, endpoint string) *gophercloud.ServiceClient {
	u := slash(endpoint)
	sc := &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: u, Type: serviceType}
	if serviceType == "image" {
		sc.ResourceBase = u + "v2/"
	}
	return sc
}

// endpointKey is the scour.yaml setting that overrides the catalog for
// serviceType.
func endpointKey(serviceType string) string {
	switch serviceType {
	case "image":
		return "images.glance.endpoint"
	case "accelerator":
		return "placement.cyborg.endpoint"
	case "placement":
		return "placement.endpoint"
	}
	return "its endpoint setting"
}
