package placement

import (
	"context"
	"fmt"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
)

// ImageClient is a client for the image service (Glance) authenticated
// with the same credentials as Placement (cfg: static token, clouds.yaml
// or OS_*; the same TLS settings), so one Keystone setup covers both.
// endpoint, when set, is Glance's URL and the catalog is not consulted;
// it is required with a static token (no Keystone, no catalog), whose
// token is then sent to Glance too (an unauthenticated Glance ignores it).
func ImageClient(ctx context.Context, cfg Config, endpoint string, getenv func(string) string) (*gophercloud.ServiceClient, error) {
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Token != "" {
		if endpoint == "" {
			return nil, fmt.Errorf("images.glance.endpoint: required when placement uses a static token (placement.token: no Keystone, so no service catalog to find Glance in)")
		}
		pc := &gophercloud.ProviderClient{HTTPClient: httpClient(tlsCfg)}
		pc.SetToken(cfg.Token)
		return imageClientAt(pc, endpoint), nil
	}
	ao, eo, err := keystoneOptions(cfg, &tlsCfg, getenv)
	if err != nil {
		return nil, fmt.Errorf("glance: %w", err)
	}
	ao.AllowReauth = true
	pc, err := openstack.NewClient(ao.IdentityEndpoint)
	if err != nil {
		return nil, fmt.Errorf("glance auth: identity endpoint %q: %w", ao.IdentityEndpoint, err)
	}
	pc.HTTPClient = httpClient(tlsCfg)
	if err := openstack.Authenticate(ctx, pc, ao); err != nil {
		return nil, &RecoverableError{Err: fmt.Errorf("glance auth against %s: %w (check credentials and that Keystone is reachable)", ao.IdentityEndpoint, err)}
	}
	if endpoint != "" {
		return imageClientAt(pc, endpoint), nil
	}
	sc, err := openstack.NewImageV2(pc, eo)
	if err != nil {
		return nil, fmt.Errorf("glance endpoint from the service catalog (region %q, interface %q): %w; set images.glance.endpoint", eo.Region, eo.Availability, err)
	}
	return sc, nil
}

func imageClientAt(pc *gophercloud.ProviderClient, endpoint string) *gophercloud.ServiceClient {
	u := slash(endpoint)
	return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: u, ResourceBase: u + "v2/", Type: "image"}
}
