package placement

// Authentication and transport: static token, clouds.yaml or OS_* through
// gophercloud, TLS options.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"gopkg.in/yaml.v3"
)

// newServiceClient authenticates and finds Placement; fields names the
// credential settings in use ("" for a static token), for the errors of
// later re-authentications. wrap, when not nil, wraps the session's HTTP
// transport before the first login (gophercloud's re-authentication
// keeps a copy of the client made then).
func newServiceClient(ctx context.Context, cfg Config, getenv func(string) string, wrap func(http.RoundTripper) http.RoundTripper) (sc *gophercloud.ServiceClient, fields string, err error) {
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	if cfg.Token != "" {
		pc := &gophercloud.ProviderClient{HTTPClient: httpClient(tlsCfg)}
		pc.SetToken(cfg.Token)
		return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slash(cfg.Endpoint), Type: "placement"}, "", nil
	}
	ao, eo, err := keystoneOptions(cfg, &tlsCfg, getenv)
	if err != nil {
		return nil, "", err
	}
	fields = credentialFields(ao, getenv)
	ao.AllowReauth = true // transparent re-authentication on token expiry
	pc, err := openstack.NewClient(ao.IdentityEndpoint)
	if err != nil {
		return nil, "", fmt.Errorf("placement auth: identity endpoint %q: %w", ao.IdentityEndpoint, err)
	}
	pc.HTTPClient = httpClient(tlsCfg)
	if wrap != nil {
		pc.HTTPClient.Transport = wrap(pc.HTTPClient.Transport)
	}
	if err := openstack.Authenticate(ctx, pc, ao); err != nil {
		return nil, "", authError(ao, err, fields)
	}
	if cfg.Endpoint != "" {
		// The operator's URL: the catalog is not consulted (it may lack
		// Placement or name an address this host cannot reach).
		return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slash(cfg.Endpoint), Type: "placement"}, fields, nil
	}
	sc, err = openstack.NewPlacementV1(pc, eo)
	if err != nil {
		return nil, "", fmt.Errorf("placement endpoint from the service catalog: %w", catalogError(pc, eo, err))
	}
	return sc, fields, nil
}

// authError explains Keystone's refusal of the first login: which
// credential fields to check (Keystone does not say which one was wrong)
// as ErrCredentials, so scourd exits instead of trying again; Keystone
// unreachable or failing (no 4xx answer) stays recoverable.
func authError(ao gophercloud.AuthOptions, err error, fields string) error {
	code, ok := responseCode(err)
	if !ok || code.Actual >= 500 || code.Actual == http.StatusTooManyRequests {
		return &RecoverableError{Err: fmt.Errorf("placement auth: Keystone at %s did not answer the login: %w (scour tries again; check that Keystone is up and reachable from this host)", ao.IdentityEndpoint, err)}
	}
	msg := strings.TrimSpace(string(code.Body))
	var body struct {
		Error struct{ Message string } `json:"error"`
	}
	keystone := json.Unmarshal(code.Body, &body) == nil && body.Error.Message != ""
	if keystone {
		msg = body.Error.Message
	}
	// Keystone answers 404 ("Could not find token") to an expired or
	// revoked OS_TOKEN: a refusal of the token, not a wrong URL.
	if code.Actual == http.StatusNotFound && !(keystone && ao.TokenID != "") {
		return fmt.Errorf("placement auth: no Keystone v3 at %s (HTTP 404 for /auth/tokens): %w; check OS_AUTH_URL (auth_url), e.g. https://keystone.example:5000/v3", ao.IdentityEndpoint, ErrCredentials)
	}
	return fmt.Errorf("placement auth: Keystone at %s refused the login (HTTP %d: %s): %w; check %s",
		ao.IdentityEndpoint, code.Actual, msg, ErrCredentials, fields)
}

// credentialFields names the settings a refused login used, as the
// operator wrote them (OS_* names; clouds.yaml's auth keys are the same
// names in lower case without OS_), and what Keystone checks about them.
func credentialFields(ao gophercloud.AuthOptions, getenv func(string) string) string {
	src := "the OS_* variables"
	if c := getenv("OS_CLOUD"); c != "" {
		src = fmt.Sprintf("clouds.yaml cloud %q (auth: section)", c)
	}
	switch {
	case ao.ApplicationCredentialID != "":
		return fmt.Sprintf("OS_APPLICATION_CREDENTIAL_ID %s and OS_APPLICATION_CREDENTIAL_SECRET in %s: the credential may be wrong, expired or deleted, or its user disabled", ao.ApplicationCredentialID, src)
	case ao.ApplicationCredentialName != "":
		return fmt.Sprintf("OS_APPLICATION_CREDENTIAL_NAME %s, OS_APPLICATION_CREDENTIAL_SECRET and its user (OS_USERNAME/OS_USER_ID, OS_USER_DOMAIN_*) in %s: the credential may be wrong, expired or deleted, or its user disabled", ao.ApplicationCredentialName, src)
	case ao.TokenID != "":
		return fmt.Sprintf("OS_TOKEN in %s: the token may have expired or been revoked (a token cannot be renewed: use a password or an application credential for scourd)", src)
	}
	user := "OS_USER_ID " + ao.UserID
	if ao.UserID == "" {
		user = fmt.Sprintf("OS_USERNAME %s in domain %s", ao.Username, coalesce(ao.DomainName, ao.DomainID))
	}
	scope := "no project scope"
	if sc := ao.Scope; sc != nil && sc.ProjectID != "" {
		scope = "project OS_PROJECT_ID " + sc.ProjectID
	} else if sc != nil && sc.ProjectName != "" {
		scope = fmt.Sprintf("project OS_PROJECT_NAME %s in domain %s (OS_PROJECT_DOMAIN_*)", sc.ProjectName, coalesce(sc.DomainName, sc.DomainID))
	}
	return fmt.Sprintf("%s (OS_USER_DOMAIN_*), OS_PASSWORD and the scope, %s, in %s: the password may be wrong, the user disabled or locked out, or without a role on that project", user, scope, src)
}

// catalogError says what the catalog holds for eo's service type
// (Placement's when eo names none) when none of its endpoints matches the
// configured interface and region.
func catalogError(pc *gophercloud.ProviderClient, eo gophercloud.EndpointOpts, err error) error {
	typ := coalesce(eo.Type, "placement")
	want := fmt.Sprintf("interface %q (placement.interface, OS_INTERFACE), region %q (placement.region, OS_REGION_NAME; \"\" = any)", eo.Availability, eo.Region)
	r, ok := pc.GetAuthResult().(tokens.CreateResult)
	if !ok {
		return fmt.Errorf("no %s endpoint for %s: %w", typ, want, err)
	}
	cat, cerr := r.ExtractServiceCatalog()
	if cerr != nil {
		return fmt.Errorf("no %s endpoint for %s: %w (and the catalog is unreadable: %v)", typ, want, err, cerr)
	}
	var have, regions []string
	for _, e := range cat.Entries {
		if e.Type != typ {
			continue
		}
		for _, ep := range e.Endpoints {
			region := coalesce(ep.Region, ep.RegionID)
			if eo.Region != "" && region != eo.Region {
				if !slices.Contains(regions, region) {
					regions = append(regions, region)
				}
				continue
			}
			have = append(have, fmt.Sprintf("%s in region %s", ep.Interface, region))
		}
	}
	if len(have) == 0 && len(regions) > 0 {
		slices.Sort(regions)
		if len(regions) > 5 {
			regions = append(regions[:5], "...")
		}
		return fmt.Errorf("the catalog entry of type %s has no endpoint in region %q (placement.region, OS_REGION_NAME), only in %s: %w",
			typ, eo.Region, strings.Join(regions, ", "), err)
	}
	if len(have) == 0 {
		return fmt.Errorf("the catalog of scour's token has no service of type %s (openstack catalog list): register its endpoints, or set %s: %w", typ, endpointKey(typ), err)
	}
	return fmt.Errorf("the catalog entry of type %s has no endpoint for %s, only: %s; set placement.interface/placement.region to one of those, or set %s: %w",
		typ, want, strings.Join(have, ", "), endpointKey(typ), err)
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
