package dashboard

import (
	"context"
	"encoding/json"
	"html/template"
	"net"
	"net/http"
	"time"
)

// Options configure the Handler.
type Options struct {
	Source Source
	// Namespace is the default namespace; "" is every namespace. A
	// request picks another with ?namespace= (empty: every namespace).
	Namespace string
	// Refresh is the page's reload interval (0: no reload).
	Refresh time.Duration
	// Timeout bounds each request's reads.
	Timeout time.Duration
	// LoopbackOnly refuses requests whose Host is not a loopback name, so
	// that a web site cannot reach the page through DNS rebinding.
	LoopbackOnly bool
}

// page is what the template renders and /api/rollouts returns.
type page struct {
	Source    string    `json:"source"`
	Namespace string    `json:"namespace"`
	Read      time.Time `json:"read"`
	Rollouts  []Rollout `json:"rollouts"`
	// Refresh, in seconds, for the meta refresh (HTML only).
	Refresh int `json:"-"`
	// Detail is set on a single Rollout's page (HTML only).
	Detail bool `json:"-"`
}

// Handler returns the dashboard: GET /, /rollouts/{namespace}/{name},
// /api/rollouts and /api/rollouts/{namespace}/{name}.
func Handler(o Options) http.Handler {
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	s := &server{o: o, tmpl: template.Must(template.New("page").Funcs(funcs).Parse(pageHTML))}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.list(false))
	mux.HandleFunc("GET /api/rollouts", s.list(true))
	mux.HandleFunc("GET /rollouts/{namespace}/{name}", s.one(false))
	mux.HandleFunc("GET /api/rollouts/{namespace}/{name}", s.one(true))
	return s.guard(mux)
}

type server struct {
	o    Options
	tmpl *template.Template
}

// guard sets the headers of every answer and refuses what the page does
// not serve.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if s.o.LoopbackOnly && !loopbackHost(r.Host) {
			http.Error(w, "the dashboard answers only to localhost, 127.0.0.1 or [::1] (Host "+r.Host+" refused)", http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *server) namespace(r *http.Request) string {
	if q := r.URL.Query(); q.Has("namespace") {
		return q.Get("namespace")
	}
	return s.o.Namespace
}

func (s *server) list(api bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.o.Timeout)
		defer cancel()
		ns := s.namespace(r)
		items, err := s.o.Source.List(ctx, ns)
		if err != nil {
			s.fail(w, api, err)
			return
		}
		s.write(w, api, page{Source: s.o.Source.Describe(), Namespace: ns, Read: time.Now().UTC(), Rollouts: items})
	}
}

func (s *server) one(api bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.o.Timeout)
		defer cancel()
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		ro, err := s.o.Source.Get(ctx, ns, name)
		if err != nil {
			s.fail(w, api, err)
			return
		}
		if api {
			s.json(w, http.StatusOK, ro)
			return
		}
		s.write(w, false, page{Source: s.o.Source.Describe(), Namespace: ns, Read: time.Now().UTC(), Rollouts: []Rollout{ro}, Detail: true})
	}
}

func (s *server) write(w http.ResponseWriter, api bool, p page) {
	if api {
		s.json(w, http.StatusOK, p)
		return
	}
	p.Refresh = int(s.o.Refresh / time.Second)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.tmpl.Execute(w, p); err != nil {
		// The header is gone; the page ends where the error happened.
		return
	}
}

func (s *server) fail(w http.ResponseWriter, api bool, err error) {
	code, msg := status(err)
	if api {
		s.json(w, code, map[string]string{"error": msg})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = s.tmpl.ExecuteTemplate(w, "error", map[string]any{"Code": code, "Status": http.StatusText(code), "Message": msg})
}

func (s *server) json(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
