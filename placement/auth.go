package placement

// Authentication and transport: static token, clouds.yaml or OS_* through
// gophercloud, TLS options.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"gopkg.in/yaml.v3"
)

func newServiceClient(ctx context.Context, cfg Config, getenv func(string) string) (*gophercloud.ServiceClient, error) {
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Token != "" {
		pc := &gophercloud.ProviderClient{HTTPClient: httpClient(tlsCfg)}
		pc.SetToken(cfg.Token)
		return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slash(cfg.Endpoint), Type: "placement"}, nil
	}
	ao, eo, err := keystoneOptions(cfg, &tlsCfg, getenv)
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
		return nil, fmt.Errorf("placement endpoint from the service catalog (region %q, interface %q): %w", eo.Region, eo.Availability, err)
	}
	if cfg.Endpoint != "" {
		sc.Endpoint = slash(cfg.Endpoint)
	}
	return sc, nil
}

// CheckCredentials resolves cfg's credentials as New does, offline (no
// request is sent): an error names what is missing. getenv supplies the
// OS_* variables (os.Getenv for the process's own, as New uses).
func CheckCredentials(cfg Config, getenv func(string) string) error {
	if cfg.Token != "" {
		return nil // endpoint + static token: Validate checks the pair
	}
	var t *tls.Config
	_, _, err := keystoneOptions(cfg, &t, getenv)
	return err
}

// keystoneOptions resolves Keystone credentials as the openstack CLI
// does: a clouds.yaml entry (Cloud, else OS_CLOUD), else the OS_*
// variables of an openrc. Both go through gophercloud's clouds.yaml
// resolution, the OS_* ones as the entry openstacksdk builds from them (its
// "envvars" cloud), so OS_USER_DOMAIN_NAME, OS_PROJECT_DOMAIN_NAME,
// application credentials and the default domain mean the same in either
// form.
func keystoneOptions(cfg Config, tlsCfg **tls.Config, getenv func(string) string) (gophercloud.AuthOptions, gophercloud.EndpointOpts, error) {
	cloud := cfg.Cloud
	if cloud == "" {
		cloud = getenv("OS_CLOUD")
	}
	var po []clouds.ParseOption
	what := fmt.Sprintf("clouds.yaml cloud %q", cloud)
	var file string // the clouds.yaml in use
	if cloud != "" {
		po = append(po, clouds.WithCloudName(cloud))
		if file = coalesce(cfg.CloudsFile, getenv("OS_CLIENT_CONFIG_FILE"), findCloudsYAML()); file != "" {
			po = append(po, clouds.WithLocations(file))
		}
	} else {
		env, err := envCloudsYAML(getenv)
		if err != nil {
			return gophercloud.AuthOptions{}, gophercloud.EndpointOpts{}, err
		}
		what = "OS_* variables"
		po = append(po, clouds.WithCloudName(envCloudName), clouds.WithCloudsYAML(bytes.NewReader(env)))
	}
	// Every option clouds.Parse would otherwise take from the process's
	// own environment is given from getenv (an empty region leaves the
	// cloud's own).
	po = append(po, clouds.WithRegion(coalesce(cfg.Region, getenv("OS_REGION_NAME"))))
	if f := getenv("OS_CACERT"); f != "" {
		po = append(po, clouds.WithCACertPath(f))
	}
	if f := getenv("OS_CERT"); f != "" {
		po = append(po, clouds.WithClientCertPath(f))
	}
	if f := getenv("OS_KEY"); f != "" {
		po = append(po, clouds.WithClientKeyPath(f))
	}
	iface := endpointInterface(cfg, getenv, file, cloud)
	po = append(po, clouds.WithEndpointType(iface))
	ao, eo, cloudTLS, err := clouds.Parse(po...)
	if err != nil {
		return ao, eo, fmt.Errorf("placement auth: %s: %w", what, err)
	}
	if cloudTLS != nil && cfg.CACert == "" && cfg.Cert == "" && !cfg.Insecure {
		*tlsCfg = cloudTLS
	}
	if ao.IdentityEndpoint == "" {
		return ao, eo, fmt.Errorf("placement: no credentials: %s give no auth_url (OS_AUTH_URL); set placement.endpoint and placement.token, placement.cloud (a clouds.yaml entry) or the OS_* variables of an openrc", what)
	}
	if ao.Password == "" && ao.TokenID == "" && ao.ApplicationCredentialSecret == "" {
		return ao, eo, fmt.Errorf("placement: %s name Keystone %s but no password, token or application credential secret (OS_PASSWORD, OS_TOKEN, OS_APPLICATION_CREDENTIAL_SECRET)", what, ao.IdentityEndpoint)
	}
	defaultDomain(&ao, getenv("OS_DEFAULT_DOMAIN"))
	eo.Availability = availability(iface)
	return ao, eo, nil
}

// defaultDomain fills the user's and the project's domain, when neither
// names one, with the default domain (OS_DEFAULT_DOMAIN, else "default"),
// as python-openstackclient does: an openrc with only OS_USERNAME and
// OS_PROJECT_NAME authenticates in the default domain. Application
// credentials carry their own user and project.
func defaultDomain(ao *gophercloud.AuthOptions, def string) {
	if ao.ApplicationCredentialID != "" || ao.ApplicationCredentialName != "" {
		ao.Scope, ao.TenantID, ao.TenantName = nil, "", ""
		if ao.ApplicationCredentialID != "" {
			ao.Username, ao.UserID, ao.DomainID, ao.DomainName = "", "", "", ""
		}
		if ao.ApplicationCredentialID != "" || ao.UserID != "" || ao.DomainID != "" || ao.DomainName != "" {
			return
		}
	}
	if def == "" {
		def = "default"
	}
	if ao.Username != "" && ao.UserID == "" && ao.DomainID == "" && ao.DomainName == "" {
		ao.DomainID = def
	}
	if sc := ao.Scope; sc != nil && sc.ProjectName != "" && sc.DomainID == "" && sc.DomainName == "" {
		sc.DomainID = def
	}
}

// EnvVars are the OS_* variables keystoneOptions reads (through New's
// getenv): scourctl compares them between the shell and scourd's
// environment file.
var EnvVars = []string{
	"OS_CLOUD", "OS_CLIENT_CONFIG_FILE", "OS_REGION_NAME", "OS_INTERFACE", "OS_ENDPOINT_TYPE",
	"OS_DEFAULT_DOMAIN", "OS_CACERT", "OS_CERT", "OS_KEY", "OS_INSECURE",
	"OS_AUTH_URL", "OS_TOKEN", "OS_USERNAME", "OS_USER_ID", "OS_PASSWORD",
	"OS_APPLICATION_CREDENTIAL_ID", "OS_APPLICATION_CREDENTIAL_NAME", "OS_APPLICATION_CREDENTIAL_SECRET",
	"OS_SYSTEM_SCOPE", "OS_PROJECT_NAME", "OS_TENANT_NAME", "OS_PROJECT_ID", "OS_TENANT_ID",
	"OS_USER_DOMAIN_NAME", "OS_USER_DOMAIN_ID", "OS_PROJECT_DOMAIN_NAME", "OS_PROJECT_DOMAIN_ID",
	"OS_DOMAIN_NAME", "OS_DOMAIN_ID", "OS_TRUST_ID",
}

// envCloudName is the clouds.yaml entry made of the OS_* variables, named
// as openstacksdk names it.
const envCloudName = "envvars"

// envCloudsYAML is a clouds.yaml holding the entry the openstack CLI makes
// of the OS_* variables (OS_TENANT_* are the old names of OS_PROJECT_*).
func envCloudsYAML(getenv func(string) string) ([]byte, error) {
	first := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	auth := &clouds.AuthInfo{
		AuthURL:                     getenv("OS_AUTH_URL"),
		Token:                       getenv("OS_TOKEN"),
		Username:                    getenv("OS_USERNAME"),
		UserID:                      getenv("OS_USER_ID"),
		Password:                    getenv("OS_PASSWORD"),
		ApplicationCredentialID:     getenv("OS_APPLICATION_CREDENTIAL_ID"),
		ApplicationCredentialName:   getenv("OS_APPLICATION_CREDENTIAL_NAME"),
		ApplicationCredentialSecret: getenv("OS_APPLICATION_CREDENTIAL_SECRET"),
		SystemScope:                 getenv("OS_SYSTEM_SCOPE"),
		ProjectName:                 first("OS_PROJECT_NAME", "OS_TENANT_NAME"),
		ProjectID:                   first("OS_PROJECT_ID", "OS_TENANT_ID"),
		UserDomainName:              getenv("OS_USER_DOMAIN_NAME"),
		UserDomainID:                getenv("OS_USER_DOMAIN_ID"),
		ProjectDomainName:           getenv("OS_PROJECT_DOMAIN_NAME"),
		ProjectDomainID:             getenv("OS_PROJECT_DOMAIN_ID"),
		DomainName:                  getenv("OS_DOMAIN_NAME"),
		DomainID:                    getenv("OS_DOMAIN_ID"),
		TrustID:                     getenv("OS_TRUST_ID"),
	}
	c := clouds.Cloud{AuthInfo: auth, RegionName: getenv("OS_REGION_NAME"),
		Interface: first("OS_INTERFACE", "OS_ENDPOINT_TYPE"), CACertFile: getenv("OS_CACERT"),
		ClientCertFile: getenv("OS_CERT"), ClientKeyFile: getenv("OS_KEY")}
	if v := getenv("OS_INSECURE"); v != "" {
		insecure, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("placement auth: OS_INSECURE=%q is not a boolean", v)
		}
		verify := !insecure
		c.Verify = &verify
	}
	return yaml.Marshal(clouds.Clouds{Clouds: map[string]clouds.Cloud{envCloudName: c}})
}

func coalesce(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func availability(i string) gophercloud.Availability {
	switch strings.TrimSuffix(i, "URL") {
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

// maxIdlePerHost keeps a connection to Placement (and Keystone) for each
// request a host makes at once: the cleans a release starts read their
// devices together, and Go's default of 2 idle connections per host
// closed the rest after each burst, so the next burst paid new TCP and
// TLS handshakes. 32 is lifecycle.max_concurrent_cleans' default.
const maxIdlePerHost = 32

func httpClient(t *tls.Config) http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = maxIdlePerHost
	if t != nil {
		tr.TLSClientConfig = t
	}
	return http.Client{Transport: tr}
}

func slash(u string) string { return strings.TrimRight(u, "/") + "/" }
