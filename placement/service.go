package placement

import (
	"context"
	"fmt"
	"os"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
)

// NewServiceClient authenticates with Placement's credentials and TLS
// settings (cfg: a static token, a clouds.yaml entry or the OS_*
// variables; getenv nil means os.Getenv) and returns a client of another
// OpenStack service of this cloud: serviceType's endpoint from the
// catalog (cfg's region and interface), or endpoint when given. With a
// static token the catalog is not consulted, so endpoint is required.
// The cyborg package uses it for Cyborg's API (service type accelerator).
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
			return nil, fmt.Errorf("%s client: placement.token is a static token, so the service catalog is not read: set the %s endpoint explicitly", serviceType, serviceType)
		}
		pc := &gophercloud.ProviderClient{HTTPClient: httpClient(tlsCfg)}
		pc.SetToken(cfg.Token)
		return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slash(endpoint), Type: serviceType}, nil
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
	sc := &gophercloud.ServiceClient{ProviderClient: pc, Type: serviceType, Endpoint: slash(endpoint)}
	if endpoint == "" {
		eo.ApplyDefaults(serviceType)
		url, err := pc.EndpointLocator(eo)
		if err != nil {
			return nil, fmt.Errorf("%s endpoint from the service catalog (region %q, interface %q): %w (set it explicitly if the catalog lacks it)", serviceType, eo.Region, eo.Availability, err)
		}
		sc.Endpoint = slash(url)
	}
	return sc, nil
}
