package placement

// Authentication and transport: static token, clouds.yaml or OS_* through
// gophercloud, TLS options.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
)

func newServiceClient(ctx context.Context, cfg Config) (*gophercloud.ServiceClient, error) {
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Token != "" {
		pc := &gophercloud.ProviderClient{HTTPClient: httpClient(tlsCfg)}
		pc.SetToken(cfg.Token)
		return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slash(cfg.Endpoint), Type: "placement"}, nil
	}
	ao, eo, err := keystoneOptions(cfg, &tlsCfg)
	if err != nil {
		return nil, err
	}
	ao.AllowReauth = true // transparent re-authentication on token expiry
	pc, err := openstack.NewClient(ao.IdentityEndpoint)
	if err != nil {
		return nil, fmt.Errorf("placement auth: identity endpoint %q: %w", ao.IdentityEndpoint, err)
	}
	pc.HTTPClient = httpClient(tlsCfg)
	if err := openstack.Authenticate(ctx, pc, ao); err != nil {
		return nil, &RecoverableError{Err: fmt.Errorf("placement auth against %s: %w (check credentials and that Keystone is reachable)", ao.IdentityEndpoint, err)}
	}
	sc, err := openstack.NewPlacementV1(pc, eo)
	if err != nil {
		return nil, fmt.Errorf("placement endpoint from the service catalog (region %q, interface %q): %w", eo.Region, cfg.Interface, err)
	}
	if cfg.Endpoint != "" {
		sc.Endpoint = slash(cfg.Endpoint)
	}
	return sc, nil
}

// keystoneOptions picks clouds.yaml (Cloud, OS_CLOUD) or OS_* variables.
func keystoneOptions(cfg Config, tlsCfg **tls.Config) (gophercloud.AuthOptions, gophercloud.EndpointOpts, error) {
	cloud := cfg.Cloud
	if cloud == "" {
		cloud = os.Getenv("OS_CLOUD")
	}
	if cloud != "" {
		var po []clouds.ParseOption
		po = append(po, clouds.WithCloudName(cloud))
		if cfg.CloudsFile != "" {
			po = append(po, clouds.WithLocations(cfg.CloudsFile))
		}
		if cfg.Region != "" {
			po = append(po, clouds.WithRegion(cfg.Region))
		}
		po = append(po, clouds.WithEndpointType(cfg.Interface))
		ao, eo, cloudTLS, err := clouds.Parse(po...)
		if err != nil {
			return ao, eo, fmt.Errorf("placement auth: clouds.yaml cloud %q: %w", cloud, err)
		}
		if cloudTLS != nil && cfg.CACert == "" && cfg.Cert == "" && !cfg.Insecure {
			*tlsCfg = cloudTLS
		}
		return ao, eo, nil
	}
	ao, err := openstack.AuthOptionsFromEnv()
	if err != nil {
		return ao, gophercloud.EndpointOpts{}, fmt.Errorf("placement auth: no endpoint+token, no clouds.yaml cloud (OS_CLOUD) and OS_* variables incomplete: %w", err)
	}
	region := cfg.Region
	if region == "" {
		region = os.Getenv("OS_REGION_NAME")
	}
	return ao, gophercloud.EndpointOpts{Region: region, Availability: availability(cfg.Interface)}, nil
}

func availability(i string) gophercloud.Availability {
	switch i {
	case "public":
		return gophercloud.AvailabilityPublic
	case "admin":
		return gophercloud.AvailabilityAdmin
	}
	return gophercloud.AvailabilityInternal
}

func tlsConfig(cfg Config) (*tls.Config, error) {
	if cfg.CACert == "" && cfg.Cert == "" && !cfg.Insecure {
		return nil, nil
	}
	t := &tls.Config{InsecureSkipVerify: cfg.Insecure} //nolint:gosec // operator's explicit choice
	if cfg.CACert != "" {
		pem, err := os.ReadFile(cfg.CACert)
		if err != nil {
			return nil, fmt.Errorf("placement.cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("placement.cacert %s: no PEM certificates found", cfg.CACert)
		}
		t.RootCAs = pool
	}
	if cfg.Cert != "" {
		kp, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("placement.cert/key: %w", err)
		}
		t.Certificates = []tls.Certificate{kp}
	}
	return t, nil
}

func httpClient(t *tls.Config) http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if t != nil {
		tr.TLSClientConfig = t
	}
	return http.Client{Transport: tr}
}

func slash(u string) string { return strings.TrimRight(u, "/") + "/" }
