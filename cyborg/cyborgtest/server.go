// Package cyborgtest is a stand-in for Cyborg's accelerator API, for
// tests of scour's Cyborg client in this package's users and in e2e (the
// real Cyborg does not run in scour's test environments: docs/cyborg.md).
// It answers what scour asks as openstack/cyborg 24e13c6 does, written
// from its source, not copied: GET /v2/accelerator_requests with the
// instance and bind_state filters of arqs.py get_all (bind_state other
// than "resolved": 400; with an instance, any of its ARQs not in a
// resolved state: 423 and no body), the collection {"arqs": [...]} with
// the fields of objects.ARQ (null where unbound) and a self link, and
// the version negotiation of controllers/base.py (OpenStack-API-Version
// "accelerator 2.0" to "2.3"; outside it 406). StartBehindKeystone makes
// it validate every token with a real Keystone as the keystonemiddleware
// in front of cyborg-api does (keystone.go).
package cyborgtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ARQ is one accelerator request the stand-in holds.
type ARQ struct {
	UUID          string
	State         string // Initial, BindStarted, Bound, BindFailed, Deleting, ...
	DeviceProfile string
	Hostname      string
	DeviceRPUUID  string
	Instance      string
	// AttachType is PCI, TEST_PCI or MDEV; Attach the attach_handle_info
	// (for PCI: domain, bus, device, function).
	AttachType string
	AttachUUID string
	Attach     map[string]string
}

// PCI is the attach_handle_info Cyborg's conductor stores for a PCI
// function "DDDD:BB:SS.F" (each part as the driver reports it).
func PCI(addr string) map[string]string {
	var d, b, s, f string
	if n, _ := fmt.Sscanf(strings.NewReplacer(":", " ", ".", " ").Replace(addr), "%s %s %s %s", &d, &b, &s, &f); n != 4 {
		panic("cyborgtest.PCI: not DDDD:BB:SS.F: " + addr)
	}
	return map[string]string{"domain": d, "bus": b, "device": s, "function": f}
}

// Server is the stand-in. Its zero value is not usable: Start one.
type Server struct {
	srv *httptest.Server
	ks  *validator // nil: any token is accepted

	mu       sync.Mutex
	arqs     []ARQ
	down     bool
	requests []Request
}

// Request is one request the stand-in received.
type Request struct {
	Method, Path, Query, Version, Token string
	// Auth is what Keystone said of Token (behind Keystone only): who
	// holds it, or why it was refused.
	Auth TokenInfo
}

// Start serves on 127.0.0.1 until Close.
func Start() *Server {
	s := &Server{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Endpoint is the URL the Keystone catalog would list for Cyborg
// (devstack registers "<api>/v2").
func (s *Server) Endpoint() string { return s.srv.URL + "/accelerator/v2" }

// Bind adds or replaces ARQs (by UUID), as Nova's bind through Cyborg
// leaves them.
func (s *Server) Bind(arqs ...ARQ) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range arqs {
		s.arqs = slices.DeleteFunc(s.arqs, func(x ARQ) bool { return x.UUID == a.UUID })
		s.arqs = append(s.arqs, a)
	}
}

// DeleteInstance removes the instance's ARQs, as
// DELETE /v2/accelerator_requests?instance= does when Nova releases them.
func (s *Server) DeleteInstance(instance string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arqs = slices.DeleteFunc(s.arqs, func(x ARQ) bool { return x.Instance == instance })
}

// SetDown makes every request fail as an unreachable API does: the
// connection closes with no answer.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Requests returns what the stand-in received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

var resolved = []string{"Bound", "BindFailed", "Deleting"} // constants.ARQ_BIND_STATES_STATUS_MAP

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get("X-Auth-Token")
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	// Validated before the request is recorded: Requests never shows a
	// request whose Auth is still being asked of Keystone (a test reading
	// them while scourd's reconciler sent one saw an empty Auth).
	var info TokenInfo
	if !down && tok != "" && s.ks != nil {
		info = s.ks.validate(r.Context(), tok)
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Version: r.Header.Get("OpenStack-API-Version"), Token: tok, Auth: info})
	arqs := slices.Clone(s.arqs)
	s.mu.Unlock()
	if down {
		panic(http.ErrAbortHandler) // the connection closes unanswered
	}
	if tok == "" {
		fault(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	if s.ks != nil {
		switch {
		case info.Err != "" && info.Status == http.StatusUnauthorized:
			fault(w, http.StatusUnauthorized, "The request you have made requires authentication.")
			return
		case info.Err != "":
			// keystonemiddleware cannot reach Keystone: 503.
			fault(w, http.StatusServiceUnavailable, "The server is currently unavailable. Please try again at a later time.")
			return
		}
	}
	if !versionOK(r.Header.Get("OpenStack-API-Version")) {
		fault(w, http.StatusNotAcceptable, "Version "+r.Header.Get("OpenStack-API-Version")+" was requested but the minor version is not supported by this service. The supported version range is: [2.0, 2.3].")
		return
	}
	w.Header().Set("OpenStack-API-Minimum-Version", "accelerator 2.0")
	w.Header().Set("OpenStack-API-Maximum-Version", "accelerator 2.3")
	w.Header().Set("Vary", "OpenStack-API-Version")
	if r.Method != http.MethodGet || r.URL.Path != "/accelerator/v2/accelerator_requests" {
		fault(w, http.StatusNotFound, "The resource could not be found.")
		return
	}
	q := r.URL.Query()
	bindState, instance := q.Get("bind_state"), q.Get("instance")
	if bindState != "" && bindState != "resolved" {
		fault(w, http.StatusBadRequest, fmt.Sprintf("Accelerator Request state %s is not in expected states [resolved].", bindState))
		return
	}
	if instance != "" {
		arqs = slices.DeleteFunc(arqs, func(a ARQ) bool { return a.Instance != instance })
		if bindState != "" && slices.ContainsFunc(arqs, func(a ARQ) bool { return !slices.Contains(resolved, a.State) }) {
			w.WriteHeader(http.StatusLocked)
			return
		}
	} else if bindState != "" {
		arqs = slices.DeleteFunc(arqs, func(a ARQ) bool { return !slices.Contains(resolved, a.State) })
	}
	out := make([]map[string]any, 0, len(arqs))
	for _, a := range arqs {
		out = append(out, s.render(a))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"arqs": out})
}

// render writes an ARQ as ARQ.convert_with_links does: every field of
// objects.ARQ, null when unset, and a self link.
func (s *Server) render(a ARQ) map[string]any {
	null := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	info := a.Attach
	if info == nil {
		info = map[string]string{}
	}
	return map[string]any{
		"uuid": a.UUID, "state": a.State, "device_profile_name": a.DeviceProfile, "device_profile_group_id": 0,
		"hostname": null(a.Hostname), "device_rp_uuid": null(a.DeviceRPUUID), "instance_uuid": null(a.Instance),
		"project_id": nil, "attach_handle_type": a.AttachType, "attach_handle_uuid": null(a.AttachUUID),
		"attach_handle_info": info, "created_at": time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339), "updated_at": nil,
		"links": []map[string]string{{"href": s.Endpoint() + "/accelerator_requests/" + a.UUID, "rel": "self"}},
	}
}

// versionOK: absent is the minimum (2.0); "accelerator 2.N" or a bare
// "2.N" with N in 0..3, or "latest".
func versionOK(h string) bool {
	if h == "" {
		return true
	}
	v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(h), "accelerator"))
	if v == "latest" {
		return true
	}
	major, minor, ok := strings.Cut(v, ".")
	n, err := strconv.Atoi(minor)
	return ok && major == "2" && err == nil && n >= 0 && n <= 3
}

// fault writes Cyborg's error body (cyborg/api/middleware/parsable_error:
// {"error_message": "{\"faultstring\": ...}"}).
func fault(w http.ResponseWriter, code int, msg string) {
	inner, _ := json.Marshal(map[string]any{"faultstring": msg, "faultcode": "Client", "debuginfo": nil})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error_message": string(inner)})
}
