package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Backend is what the endpoint asks scourd for.
type Backend interface {
	// Status is the host's devices; when Placement does not answer, the
	// store's view with Report.PlacementError saying why (an error is
	// for a store that cannot be read).
	Status(ctx context.Context) (Report, error)
	Rescan(reason string)
	// Clean has device (PCI address or resource provider UUID) cleaned
	// now; Retire keeps it reserved with reason, wiping it first unless
	// noWipe when it was not cleaned since its last tenant. Both return
	// what was done, for the operator; an *OperatorError is the
	// operator's to fix.
	Clean(ctx context.Context, device, by string) (string, error)
	Retire(ctx context.Context, device, by, reason string, noWipe bool) (string, error)
}

// OperatorError is a refused operation (allocated device, unknown device,
// missing reason): HTTP 409, its text shown as is.
type OperatorError struct{ Msg string }

func (e *OperatorError) Error() string { return e.Msg }

// placementErrorHeader carries Report.PlacementError on GET /v1/status.
const placementErrorHeader = "Scour-Placement-Error"

// SocketMode is the socket's permission: root and the group read and write.
const SocketMode = 0o660

// Server serves the admin endpoint on its socket.
type Server struct {
	path string
	ln   net.Listener
	srv  *http.Server
	log  *slog.Logger
}

// Listen creates the socket (replacing a stale one), owned by root and
// cfg.Group with mode 0660.
func Listen(cfg Config, b Backend, log *slog.Logger) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return nil, fmt.Errorf("admin socket directory: %w", err)
	}
	if fi, err := os.Lstat(cfg.Socket); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		_ = os.Remove(cfg.Socket) // left by a scourd that did not stop cleanly
	}
	ln, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := permissions(cfg); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		rep, err := b.Status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if rep.PlacementError != "" {
			// The body stays the device list an older scourctl reads;
			// each device's state says Placement's view is missing.
			w.Header().Set(placementErrorHeader, strings.Join(strings.Fields(rep.PlacementError), " "))
		}
		if rep.Devices == nil {
			rep.Devices = []DeviceStatus{}
		}
		_ = json.NewEncoder(w).Encode(rep.Devices)
	})
	mux.HandleFunc("POST /v1/rescan", func(w http.ResponseWriter, r *http.Request) {
		reason := "operator"
		if q := r.URL.Query().Get("reason"); q != "" {
			reason = "operator: " + q
		}
		log.Info("rescan asked on the admin socket", "reason", reason)
		b.Rescan(reason)
		w.WriteHeader(http.StatusAccepted)
	})
	act := func(do func(r *http.Request) (string, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			msg, err := do(r)
			var oe *OperatorError
			switch {
			case errors.As(err, &oe):
				http.Error(w, oe.Msg, http.StatusConflict)
			case err != nil:
				http.Error(w, err.Error(), http.StatusBadGateway)
			default:
				_, _ = io.WriteString(w, msg)
			}
		}
	}
	mux.HandleFunc("POST /v1/clean", act(func(r *http.Request) (string, error) {
		q := r.URL.Query()
		log.Info("clean asked on the admin socket", "device", q.Get("device"), "by", q.Get("by"))
		return b.Clean(r.Context(), q.Get("device"), q.Get("by"))
	}))
	mux.HandleFunc("POST /v1/retire", act(func(r *http.Request) (string, error) {
		q := r.URL.Query()
		if strings.TrimSpace(q.Get("reason")) == "" {
			return "", &OperatorError{"retire needs a reason (--reason): it is recorded with the device"}
		}
		noWipe := q.Get("no_wipe") == "1"
		log.Info("retire asked on the admin socket", "device", q.Get("device"), "by", q.Get("by"), "reason", q.Get("reason"), "no_wipe", noWipe)
		return b.Retire(r.Context(), q.Get("device"), q.Get("by"), q.Get("reason"), noWipe)
	}))
	return &Server{path: cfg.Socket, ln: ln, log: log,
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

func permissions(cfg Config) error {
	gid := 0
	if cfg.Group != "" {
		g, err := user.LookupGroup(cfg.Group)
		if err != nil {
			return fmt.Errorf("admin.group: %w", err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return fmt.Errorf("admin.group %s: gid %q", cfg.Group, g.Gid)
		}
	}
	if err := os.Chown(cfg.Socket, -1, gid); err != nil {
		return fmt.Errorf("admin socket %s: giving it to group %d: %w", cfg.Socket, gid, err)
	}
	if err := os.Chmod(cfg.Socket, SocketMode); err != nil {
		return fmt.Errorf("admin socket %s: %w", cfg.Socket, err)
	}
	return nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve answers until Shutdown.
func (s *Server) Serve() {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("admin socket stopped", "socket", s.path, "err", err)
	}
}

// Shutdown stops answering and removes the socket.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	_ = os.Remove(s.path)
	return err
}
