package app

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/scour-project/scour/config"
	"github.com/scour-project/scour/metrics"
	"github.com/scour-project/scour/placement"
)

// The deploy files against the code: every variable, path, port, probe
// and secret key they name is one scour uses.

type container struct {
	Name, Image string
	Args        []string
	Env         []struct {
		Name      string
		Value     string
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
			FieldRef     *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	}
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	StartupProbe    *probe `yaml:"startupProbe"`
	LivenessProbe   *probe `yaml:"livenessProbe"`
	ReadinessProbe  *probe `yaml:"readinessProbe"`
	SecurityContext struct {
		Privileged             bool `yaml:"privileged"`
		ReadOnlyRootFilesystem bool `yaml:"readOnlyRootFilesystem"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet struct{ Path, Port string } `yaml:"httpGet"`
}

type k8sObject struct {
	Kind                         string
	Metadata                     struct{ Name, Namespace string }
	AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
	Spec                         struct {
		Template struct {
			Metadata struct {
				Labels      map[string]string
				Annotations map[string]string
			}
			Spec struct {
				ServiceAccountName           string `yaml:"serviceAccountName"`
				AutomountServiceAccountToken *bool  `yaml:"automountServiceAccountToken"`
				HostNetwork                  bool   `yaml:"hostNetwork"`
				DNSPolicy                    string `yaml:"dnsPolicy"`
				HostPID                      bool   `yaml:"hostPID"`
				Tolerations                  []map[string]string
				Containers                   []container
				Volumes                      []struct {
					Name     string
					HostPath *struct{ Path, Type string } `yaml:"hostPath"`
					Secret   *struct {
						SecretName string `yaml:"secretName"`
					}
					ConfigMap *struct{ Name string } `yaml:"configMap"`
					EmptyDir  *struct{}              `yaml:"emptyDir"`
				}
			}
		}
	}
}

func readDaemonSet(t *testing.T) (sa, ds k8sObject, header string) {
	t.Helper()
	raw, err := os.ReadFile("../deploy/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/daemonset.yaml: %v", err)
		}
		switch o.Kind {
		case "ServiceAccount":
			sa = o
		case "DaemonSet":
			ds = o
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() && strings.HasPrefix(sc.Text(), "#") {
		header += sc.Text() + "\n"
	}
	return sa, ds, header
}

func TestDaemonSetMatchesTheCode(t *testing.T) {
	sa, ds, header := readDaemonSet(t)
	pod := ds.Spec.Template.Spec
	if sa.Metadata.Name == "" || pod.ServiceAccountName != sa.Metadata.Name || sa.Metadata.Namespace != ds.Metadata.Namespace {
		t.Errorf("pod's ServiceAccount %q is not the manifest's %q", pod.ServiceAccountName, sa.Metadata.Name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("scourd does not use the Kubernetes API: no service account token must be mounted")
	}
	if len(pod.Tolerations) == 0 || pod.HostPID {
		t.Errorf("tolerations %v, hostPID %v", pod.Tolerations, pod.HostPID)
	}
	// devlink (NIC firmware steps) answers only in the namespace its
	// instances live in, the node's; cluster DNS must still resolve.
	if !pod.HostNetwork || pod.DNSPolicy != "ClusterFirstWithHostNet" {
		t.Errorf("hostNetwork %v, dnsPolicy %q: NIC firmware steps need the node's network namespace (devlink), with ClusterFirstWithHostNet", pod.HostNetwork, pod.DNSPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	volumes := map[string]int{}
	for i, v := range pod.Volumes {
		volumes[v.Name] = i
	}
	mounts := map[string]string{} // path -> volume
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %s names no volume %s", m.MountPath, m.Name)
		}
		mounts[path.Join(m.MountPath)] = m.Name
	}

	// The configuration scourd reads is the ConfigMap's scour.yaml.
	if len(c.Args) != 2 || c.Args[0] != "--config" {
		t.Fatalf("args %v", c.Args)
	}
	cfgDir, cfgFile := path.Split(c.Args[1])
	if v := mounts[path.Clean(cfgDir)]; v == "" || pod.Volumes[volumes[v]].ConfigMap == nil ||
		!strings.Contains(header, "--from-file="+cfgFile+"=deploy/scour.yaml") || !strings.Contains(header, pod.Volumes[volumes[v]].ConfigMap.Name) {
		t.Errorf("--config %s is not the ConfigMap the header creates", c.Args[1])
	}

	// Every variable is one scour or the OpenStack client code reads.
	scourVars := map[string]bool{}
	for _, v := range config.EnvVars() {
		scourVars[v.Name] = true
	}
	osVars := map[string]bool{}
	for _, cloud := range []string{"", "scour"} { // the OS_* form, then clouds.yaml
		_ = placement.CheckCredentials(placement.Config{}, func(k string) string {
			osVars[k] = true
			if k == "OS_CLOUD" {
				return cloud
			}
			return ""
		})
	}
	env := map[string]string{}
	fieldRefs := map[string]string{} // variable -> downward API field
	for _, e := range c.Env {
		// Kubernetes expands $(VAR) only from variables defined above;
		// any other is left as it is.
		for _, ref := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(e.Value, -1) {
			if _, ok := env[ref[1]]; !ok {
				t.Errorf("env %s refers to $(%s), which is not defined above it", e.Name, ref[1])
			}
		}
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fieldRefs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
		switch {
		case strings.HasPrefix(e.Name, "SCOUR_") && !scourVars[e.Name]:
			t.Errorf("env %s is not a scour setting", e.Name)
		case strings.HasPrefix(e.Name, "OS_") && !osVars[e.Name]:
			t.Errorf("env %s is not read by scour's Placement credentials", e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			if !strings.Contains(header, "secret generic "+ref.Name) || !strings.Contains(header, ref.Key+"=") {
				t.Errorf("env %s comes from secret %s key %s, which the header's kubectl command does not create", e.Name, ref.Name, ref.Key)
			}
		}
	}
	if _, ok := env["SCOUR_BUS_URL"]; !ok {
		t.Error("no broker URL from the Secret")
	}
	// clouds.yaml: OS_CLIENT_CONFIG_FILE is the Secret's file.
	if f := env["OS_CLIENT_CONFIG_FILE"]; f == "" || pod.Volumes[volumes[mounts[f]]].Secret == nil || env["OS_CLOUD"] == "" {
		t.Errorf("OS_CLIENT_CONFIG_FILE %q is not a mounted Secret file (or OS_CLOUD is unset)", f)
	}

	// The state path of the shipped config is on the node.
	cfg, err := config.Load("../deploy/scour.yaml", true, []string{"SCOUR_HOST=compute"})
	if err != nil {
		t.Fatal(err)
	}
	st := pod.Volumes[volumes[mounts[cfg.Claims.StatePath]]]
	if mounts[cfg.Claims.StatePath] == "" || st.HostPath == nil || st.HostPath.Path != cfg.Claims.StatePath {
		t.Errorf("claims.state_path %s is not a hostPath mount", cfg.Claims.StatePath)
	}
	// The root filesystem is read-only: what scourd writes is a volume.
	if !c.SecurityContext.ReadOnlyRootFilesystem || mounts["/tmp"] == "" || mounts[cfg.Hardware.SysfsRoot] == "" || mounts["/dev"] == "" ||
		mounts[path.Dir(cfg.Admin.Socket)] == "" {
		t.Errorf("read-only root %v; mounts %v lack /tmp, %s, /dev or the admin socket's %s", c.SecurityContext.ReadOnlyRootFilesystem, mounts,
			cfg.Hardware.SysfsRoot, path.Dir(cfg.Admin.Socket))
	}

	// Port and probes are scourd's. Under hostNetwork the port is the
	// node's: scourd listens on the node's IP (the pod IP the probes and
	// the scrape use), not on every interface of the node.
	httpAddr, ok := env["SCOUR_HTTP_ADDRESS"]
	host, port, _ := net.SplitHostPort(httpAddr)
	if !ok || host != "$(HOST_IP)" || fieldRefs["HOST_IP"] != "status.hostIP" {
		t.Errorf("SCOUR_HTTP_ADDRESS %q (HOST_IP from %q): scourd must listen on $(HOST_IP), the node's IP (status.hostIP), not every interface of the node",
			httpAddr, fieldRefs["HOST_IP"])
	}
	if _, defPort, _ := net.SplitHostPort(cfg.HTTP.Address); defPort != "9464" {
		t.Errorf("http.address %s: the shipped port is 9464", cfg.HTTP.Address)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || port != "9464" || c.Ports[0].ContainerPort != 9464 ||
		ds.Spec.Template.Metadata.Annotations["prometheus.io/port"] != port {
		t.Errorf("ports %+v, SCOUR_HTTP_ADDRESS %s, prometheus.io/port %s", c.Ports, httpAddr, ds.Spec.Template.Metadata.Annotations["prometheus.io/port"])
	}
	h := metrics.New().Handler(func() error { return nil })
	for what, pr := range map[string]*probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
		if pr == nil {
			t.Errorf("no %s", what)
			continue
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, pr.HTTPGet.Path, nil))
		if rec.Code != http.StatusOK || pr.HTTPGet.Port != "http" {
			t.Errorf("%s GET %s on port %s: %d", what, pr.HTTPGet.Path, pr.HTTPGet.Port, rec.Code)
		}
	}
}

// ScourDown watches up{job="scour"}, but the DaemonSet's prometheus.io/*
// annotations give job="kubernetes-pods" with the usual scrape job: the
// relabel rule the alert rules' header documents must give the
// DaemonSet's pods the job the alert watches.
func TestScrapeRelabelGivesScourDownsJob(t *testing.T) {
	_, ds, _ := readDaemonSet(t)
	raw, err := os.ReadFile("../deploy/prometheus/scour-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	job := ""
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if m := regexp.MustCompile(`^up\{job="([^"]+)"\} == 0$`).FindStringSubmatch(r.Expr); r.Alert == "ScourDown" && m != nil {
				job = m[1]
			}
		}
	}
	if job == "" {
		t.Fatal(`no ScourDown alert on up{job="..."} == 0`)
	}
	// The header's snippet: the comment lines indented under "#   ".
	var snippet strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if s, ok := strings.CutPrefix(line, "#   "); ok {
			snippet.WriteString(s + "\n")
		}
	}
	var relabel []struct {
		SourceLabels []string `yaml:"source_labels"`
		Regex        string
		TargetLabel  string `yaml:"target_label"`
		Replacement  string
	}
	if err := yaml.Unmarshal([]byte(snippet.String()), &relabel); err != nil || len(relabel) != 1 {
		t.Fatalf("the header's relabel rule %q: %v", snippet.String(), err)
	}
	r := relabel[0]
	// Prometheus's pod label meta label: the name with every character
	// outside [a-zA-Z0-9_] replaced by _.
	label, ok := strings.CutPrefix(strings.Join(r.SourceLabels, ";"), "__meta_kubernetes_pod_label_")
	value := ""
	for k, v := range ds.Spec.Template.Metadata.Labels {
		if regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_") == label {
			value = v
		}
	}
	if !ok || value == "" || !regexp.MustCompile("^(?:"+r.Regex+")$").MatchString(value) || r.TargetLabel != "job" || r.Replacement != job {
		t.Errorf("relabel %+v does not give the DaemonSet's pods (labels %v) job=%q", r, ds.Spec.Template.Metadata.Labels, job)
	}
}

// unitDirectives reads a systemd unit's Key=Value lines.
func unitDirectives(t *testing.T, p string) map[string][]string {
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			out[k] = append(out[k], v)
		}
	}
	return out
}

func TestSystemdUnitMatchesTheCode(t *testing.T) {
	d := unitDirectives(t, "../deploy/scourd.service")
	if got := d["ExecStart"]; len(got) != 1 || !strings.HasSuffix(got[0], "scourd --config "+config.DefaultPath) {
		t.Errorf("ExecStart %v does not read %s", got, config.DefaultPath)
	}
	// scourctl reads the same environment file (cmd/scourctl defaultEnvFile).
	if got := d["EnvironmentFile"]; len(got) != 1 || strings.TrimPrefix(got[0], "-") != "/etc/scour/scourd.env" {
		t.Errorf("EnvironmentFile %v", got)
	}
	if got := strings.Fields(strings.Join(d["RestartPreventExitStatus"], " ")); !slices.Contains(got, "2") || !slices.Contains(got, "78") {
		t.Errorf("RestartPreventExitStatus %v lacks 2 (invalid configuration) or 78 (broker refusal)", got)
	}
	cfg, err := config.Load("../deploy/scour.yaml", true, []string{"SCOUR_HOST=compute"})
	if err != nil {
		t.Fatal(err)
	}
	if got := d["StateDirectory"]; len(got) != 1 || "/var/lib/"+got[0] != cfg.Claims.StatePath {
		t.Errorf("StateDirectory %v is not claims.state_path %s (ProtectSystem=strict leaves only it writable)", got, cfg.Claims.StatePath)
	}
	if got := d["RuntimeDirectory"]; len(got) != 1 || "/run/"+got[0] != path.Dir(cfg.Admin.Socket) {
		t.Errorf("RuntimeDirectory %v does not hold admin.socket %s", got, cfg.Admin.Socket)
	}
	// The hardening keeps its documented score.
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is missing: make test installs it (scripts/ensure-debian-tools.sh systemd-analyze)")
	}
	out, err := exec.Command(sa, "security", "--offline=true", "--threshold=35", "../deploy/scourd.service").CombinedOutput()
	score := regexp.MustCompile(`Overall exposure level for scourd.service: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || score == nil {
		t.Fatalf("systemd-analyze security: %v (want an exposure of 3.5 or better)\n%s", err, out)
	}
	raw, _ := os.ReadFile("../deploy/scourd.service")
	if !strings.Contains(string(raw), "--offline=true: "+string(score[1])+" OK") {
		t.Errorf("the unit's comment does not state the current score %s", score[1])
	}
}

func TestDockerfileHasTheConfiguredTools(t *testing.T) {
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`apt-get install -y --no-install-recommends ([a-z0-9 .+-]+)`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("no apt-get install line in the Dockerfile")
	}
	pkgs := strings.Fields(string(m[1]))
	script, _ := os.ReadFile("../scripts/image.sh")
	sm := regexp.MustCompile(`(?m)^packages=\(([^)]*)\)`).FindSubmatch(script)
	if sm == nil || !slices.Equal(strings.Fields(string(sm[1])), pkgs) {
		t.Errorf("scripts/image.sh packages %q differ from the Dockerfile's %v", sm, pkgs)
	}
	cfg, err := config.Load("../deploy/scour.yaml", true, []string{"SCOUR_HOST=compute"})
	if err != nil {
		t.Fatal(err)
	}
	provides := map[string]string{"nvme": "nvme-cli", "devlink": "iproute2"}
	for _, tool := range []string{cfg.Hardware.Tools.NVMe, cfg.Hardware.Tools.Devlink, cfg.Hardware.Tools.NvidiaSMI} {
		pkg, ok := provides[tool]
		switch {
		case ok && !slices.Contains(pkgs, pkg):
			t.Errorf("the config names %s, but the image lacks %s", tool, pkg)
		case !ok && !strings.Contains(string(raw), tool):
			t.Errorf("the config names %s; the Dockerfile neither installs it nor says why not", tool)
		}
	}
	for _, want := range []string{"COPY deploy/scour.yaml " + config.DefaultPath, `CMD ["--config", "` + config.DefaultPath + `"]`, "EXPOSE 9464"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
