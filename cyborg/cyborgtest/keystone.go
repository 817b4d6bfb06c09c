package cyborgtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Keystone is the Keystone a stand-in behind Keystone validates tokens
// with, and the service user it validates them as (keystonemiddleware's
// [keystone_authtoken] auth_url, username, password, project_name; the
// Default domain).
type Keystone struct {
	URL                         string // identity endpoint with /v3
	User, Password, ProjectName string
}

// TokenInfo is Keystone's answer about one token: the holder's user and
// project ids and role names when valid, else the status and why.
type TokenInfo struct {
	UserID, ProjectID string
	Roles             []string
	Status            int    // Keystone's status for GET /v3/auth/tokens
	Err               string // why the token was not accepted ("" when valid)
}

// StartBehindKeystone is Start with every token validated by k as
// keystonemiddleware does for cyborg-api: GET /v3/auth/tokens with the
// token as X-Subject-Token and the service user's own token as
// X-Auth-Token, not cached (a revoked token is refused at once). An
// invalid, expired or revoked token gets 401; Keystone unreachable, 503.
func StartBehindKeystone(k Keystone) *Server {
	s := &Server{ks: &validator{k: k, client: &http.Client{Timeout: 30 * time.Second}}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

type validator struct {
	k      Keystone
	client *http.Client

	mu      sync.Mutex
	service string // the service user's token
	expires time.Time
}

func (v *validator) validate(ctx context.Context, token string) TokenInfo {
	for attempt := 0; ; attempt++ {
		svc, err := v.serviceToken(ctx, attempt > 0)
		if err != nil {
			return TokenInfo{Err: "service user login: " + err.Error()}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(v.k.URL, "/")+"/auth/tokens", nil)
		req.Header.Set("X-Auth-Token", svc)
		req.Header.Set("X-Subject-Token", token)
		resp, err := v.client.Do(req)
		if err != nil {
			return TokenInfo{Err: err.Error()}
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			var out struct {
				Token struct {
					User    struct{ ID string } `json:"user"`
					Project struct{ ID string } `json:"project"`
					Roles   []struct{ Name string }
				} `json:"token"`
			}
			if err := json.Unmarshal(raw, &out); err != nil {
				return TokenInfo{Status: resp.StatusCode, Err: "unreadable validation: " + err.Error()}
			}
			info := TokenInfo{UserID: out.Token.User.ID, ProjectID: out.Token.Project.ID, Status: resp.StatusCode}
			for _, r := range out.Token.Roles {
				info.Roles = append(info.Roles, r.Name)
			}
			return info
		case resp.StatusCode == http.StatusUnauthorized && attempt == 0:
			continue // the service token itself expired: log in again
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusUnauthorized:
			return TokenInfo{Status: http.StatusUnauthorized, Err: fmt.Sprintf("Keystone answered %d: %s", resp.StatusCode, bytes.TrimSpace(raw))}
		default:
			return TokenInfo{Status: resp.StatusCode, Err: fmt.Sprintf("Keystone answered %d: %s", resp.StatusCode, bytes.TrimSpace(raw))}
		}
	}
}

// serviceToken is the service user's token, logged in again when fresh
// is set or it has under a minute left.
func (v *validator) serviceToken(ctx context.Context, fresh bool) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !fresh && v.service != "" && time.Until(v.expires) > time.Minute {
		return v.service, nil
	}
	body, _ := json.Marshal(map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{"user": map[string]any{
			"name": v.k.User, "password": v.k.Password, "domain": map[string]any{"id": "default"}}}},
		"scope": map[string]any{"project": map[string]any{"name": v.k.ProjectName, "domain": map[string]any{"id": "default"}}}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(v.k.URL, "/")+"/auth/tokens", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("Keystone answered %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	var out struct {
		Token struct {
			ExpiresAt time.Time `json:"expires_at"`
		} `json:"token"`
	}
	_ = json.Unmarshal(raw, &out)
	v.service, v.expires = resp.Header.Get("X-Subject-Token"), out.Token.ExpiresAt
	return v.service, nil
}
