package inbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// Backend is what the inbox stands on: the service's runtime for reading, and
// its own calls for everything that writes or authenticates, so that a
// decision made in the inbox is the decision the API would have made, with
// the same events and the same wakes of held requests.
type Backend struct {
	Runtime *runtime.Runtime
	// Authenticate returns the principal of a bearer token, or false.
	Authenticate func(token string) (api.Principal, bool)
	// Present, if set, reports whether a principal is still one of the
	// service's: the session of one removed since sign-in (serve's reload on
	// SIGHUP) ends at its next request.
	Present func(api.Principal) bool
	// Events is the service's server-sent event stream.
	Events http.Handler
	// Decide approves (or rejects) a pending request as the principal named by,
	// with the approver's note ("" for none; docs/approvals.md).
	Decide func(ctx context.Context, by, agent, id, note string, approve bool) (lineage.Verdict, error)
	// Terminate is the kill switch, pulled by the principal named by.
	Terminate func(ctx context.Context, by, agent, note string) error
	// Verify is the service's verify of one agent's log.
	Verify func(agent string) (api.VerifyResult, error)
	// Status maps an error of the runtime to an HTTP status and error code.
	Status func(error) (int, string)
	// Logger gets the errors of the pages; nil discards them.
	Logger *slog.Logger
	// SessionTTL is how long a session lasts after sign-in (default 8h).
	SessionTTL time.Duration
	// Now is the clock of sessions (default time.Now).
	Now func() time.Time
}

// DefaultSessionTTL is the lifetime of a session (D121: sessions).
const DefaultSessionTTL = 8 * time.Hour

// Patterns are the routes the inbox serves; the service mounts each on its mux.
// None starts with /v1/: the API and the inbox never share a path (D120: where the inbox lives).
var Patterns = []string{
	"GET /{$}",
	"GET /signin",
	"POST /signin",
	"POST /signout",
	"GET /agents",
	"GET /agents/{agent}",
	"POST /agents/{agent}/requests/{id}/approve",
	"POST /agents/{agent}/requests/{id}/reject",
	"POST /agents/{agent}/terminate",
	"GET /inbox/pending",
	"GET /inbox/events",
	"GET /static/{file}",
}

// Headers of every inbox response (docs/inbox.md): no inline script, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

const (
	sessionCookie = "lineage_session"
	signinCookie  = "lineage_signin"
	maxForm       = 64 << 10
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Inbox is the http.Handler of the inbox's routes.
type Inbox struct {
	b     Backend
	log   *slog.Logger
	mux   *http.ServeMux
	pages map[string]*template.Template
	rows  *template.Template

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*session
}

type session struct {
	p       api.Principal
	csrf    string
	expires time.Time
}

// New builds the inbox over a backend.
func New(b Backend) *Inbox {
	if b.SessionTTL <= 0 {
		b.SessionTTL = DefaultSessionTTL
	}
	if b.Now == nil {
		b.Now = time.Now
	}
	log := b.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in := &Inbox{b: b, log: log, mux: http.NewServeMux(), sessions: map[[sha256.Size]byte]*session{}}
	in.parse()
	handlers := map[string]http.HandlerFunc{
		"GET /{$}":            in.staff(in.pendingPage),
		"GET /signin":         in.signinPage,
		"POST /signin":        in.signin,
		"POST /signout":       in.staffPost(in.signout),
		"GET /agents":         in.staff(in.agentsPage),
		"GET /agents/{agent}": in.staff(in.agentPage),
		"POST /agents/{agent}/requests/{id}/approve": in.staffPost(func(w http.ResponseWriter, r *http.Request, s *session) {
			in.decide(w, r, s, true)
		}),
		"POST /agents/{agent}/requests/{id}/reject": in.staffPost(func(w http.ResponseWriter, r *http.Request, s *session) {
			in.decide(w, r, s, false)
		}),
		"POST /agents/{agent}/terminate": in.staffPost(in.terminate),
		"GET /inbox/pending":             in.staff(in.pendingRows),
		"GET /inbox/events": in.staff(func(w http.ResponseWriter, r *http.Request, _ *session) {
			if in.b.Events == nil {
				http.Error(w, "no event stream", http.StatusNotFound)
				return
			}
			in.b.Events.ServeHTTP(w, r)
		}),
		"GET /static/{file}": in.static,
	}
	for _, p := range Patterns {
		in.mux.Handle(p, handlers[p])
	}
	return in
}

func (in *Inbox) parse() {
	funcs := template.FuncMap{
		"since":   func(t time.Time) string { return since(in.b.Now().Sub(t)) },
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"add":     func(b, a any) any { return arith(a, b, 1) },
		"sub":     func(b, a any) any { return arith(a, b, -1) },
	}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html"))
	in.pages = map[string]*template.Template{}
	for _, name := range []string{"signin", "pending", "agents", "agent", "error"} {
		t := template.Must(base.Clone())
		in.pages[name] = template.Must(t.ParseFS(templateFS, "templates/"+name+".html"))
	}
	in.rows = base
}

// ServeHTTP sets the security headers, then routes.
func (in *Inbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	in.mux.ServeHTTP(w, r)
}

func (in *Inbox) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if !fs.ValidPath(name) || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, staticFS, "static/"+name)
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// current returns the session of the request's cookie, if it is live.
func (in *Inbox) current(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	key := sha256.Sum256([]byte(c.Value))
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.sessions[key]
	if s == nil {
		return nil
	}
	if !in.b.Now().Before(s.expires) || (in.b.Present != nil && !in.b.Present(s.p)) {
		delete(in.sessions, key)
		return nil
	}
	return s
}

// staff serves a page to a signed-in admin or approver; others go to sign-in.
func (in *Inbox) staff(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := in.current(r)
		if s == nil {
			if wantsJSON(r) || r.URL.Path == "/inbox/events" || r.URL.Path == "/inbox/pending" {
				in.fail(w, r, http.StatusUnauthorized, "unauthorized", "sign in first")
				return
			}
			http.Redirect(w, r, "/signin", http.StatusSeeOther)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		h(w, r, s)
	}
}

// staffPost is staff for a form: it also needs the session's CSRF token (D122: CSRF).
func (in *Inbox) staffPost(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := in.current(r)
		if s == nil {
			in.fail(w, r, http.StatusUnauthorized, "unauthorized", "sign in first: there is no session, or it has expired")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			in.fail(w, r, http.StatusBadRequest, "bad_request", "the form does not parse: "+err.Error())
			return
		}
		if !sameToken(r.PostFormValue("csrf"), s.csrf) {
			in.fail(w, r, http.StatusForbidden, "csrf", "the form's CSRF token is missing or wrong: reload the page and try again")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		h(w, r, s)
	}
}

func sameToken(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func (in *Inbox) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

type signinData struct {
	CSRF, Error string
}

func (in *Inbox) signinPage(w http.ResponseWriter, r *http.Request) {
	if in.current(r) != nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	in.signinForm(w, r, http.StatusOK, "")
}

// signinForm renders the sign-in form with a fresh double-submit token: the
// form's field must equal the cookie (D122: CSRF).
func (in *Inbox) signinForm(w http.ResponseWriter, r *http.Request, status int, msg string) {
	tok := randomToken()
	http.SetCookie(w, in.cookie(r, signinCookie, tok, 3600))
	w.Header().Set("Cache-Control", "no-store")
	in.render(w, status, "signin", page{Title: "Sign in", Data: signinData{CSRF: tok, Error: msg}})
}

func (in *Inbox) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		in.signinForm(w, r, http.StatusBadRequest, "The form does not parse.")
		return
	}
	c, err := r.Cookie(signinCookie)
	if err != nil || !sameToken(r.PostFormValue("csrf"), c.Value) {
		in.signinForm(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong: try again.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	p, ok := api.Principal{}, false
	if token != "" && in.b.Authenticate != nil {
		p, ok = in.b.Authenticate(token)
	}
	switch {
	case !ok:
		in.signinForm(w, r, http.StatusUnauthorized, "That token is not known to this server.")
		return
	case p.Role != "admin" && p.Role != "approver":
		in.signinForm(w, r, http.StatusForbidden, "Agent tokens cannot sign in: use an approver's or an admin's token.")
		return
	}
	value := randomToken()
	now := in.b.Now()
	in.mu.Lock()
	for k, s := range in.sessions { // sweep the expired
		if !now.Before(s.expires) {
			delete(in.sessions, k)
		}
	}
	in.sessions[sha256.Sum256([]byte(value))] = &session{p: p, csrf: randomToken(), expires: now.Add(in.b.SessionTTL)}
	in.mu.Unlock()
	http.SetCookie(w, in.cookie(r, signinCookie, "", -1))
	http.SetCookie(w, in.cookie(r, sessionCookie, value, int(in.b.SessionTTL/time.Second)))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (in *Inbox) signout(w http.ResponseWriter, r *http.Request, _ *session) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		in.mu.Lock()
		delete(in.sessions, sha256.Sum256([]byte(c.Value)))
		in.mu.Unlock()
	}
	http.SetCookie(w, in.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// page is what the layout renders.
type page struct {
	Title   string
	Nav     string
	Session *session
	Live    string // "pending": the page listens to the event stream
	Data    any
}

// Name is the signed-in principal's name, for the layout.
func (s *session) Name() string { return s.p.Name }

// Role is the signed-in principal's role, for the layout.
func (s *session) Role() string { return string(s.p.Role) }

// CSRF is the session's form token, for the layout.
func (s *session) CSRF() string { return s.csrf }

func (in *Inbox) render(w http.ResponseWriter, status int, name string, p page) {
	var buf strings.Builder
	if err := in.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		in.log.Error("inbox: rendering a page", "page", name, "error", err.Error())
		http.Error(w, "the page did not render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

type errorData struct {
	Status  int
	Code    string
	Message string
}

// fail answers an error as JSON to a script and as a page to a person.
func (in *Inbox) fail(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if wantsJSON(r) {
		writeJSON(w, status, map[string]string{"code": code, "message": msg})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	in.render(w, status, "error", page{Title: "Error", Session: in.current(r), Data: errorData{status, code, msg}})
}

// failErr is fail for an error of the runtime.
func (in *Inbox) failErr(w http.ResponseWriter, r *http.Request, err error) {
	status, code := http.StatusServiceUnavailable, "unavailable"
	if in.b.Status != nil {
		status, code = in.b.Status(err)
	}
	if status >= 500 {
		in.log.Error("inbox", "path", r.URL.Path, "error", err.Error())
	}
	in.fail(w, r, status, code, err.Error())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"encoding the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decide approves or rejects one request as the signed-in principal.
func (in *Inbox) decide(w http.ResponseWriter, r *http.Request, s *session, approve bool) {
	agent, id := r.PathValue("agent"), r.PathValue("id")
	v, err := in.b.Decide(r.Context(), s.p.Name, agent, id, strings.TrimSpace(r.PostFormValue("note")), approve)
	if err != nil {
		in.failErr(w, r, err)
		return
	}
	if wantsJSON(r) {
		verb := "rejected"
		if approve {
			verb = "approved"
		}
		writeJSON(w, http.StatusOK, map[string]any{"verdict": v,
			"message": fmt.Sprintf("Request %s of %s %s: %s (%s).", id, agent, verb, v.Decision, v.Reason)})
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// terminate pulls the kill switch; the form must say it means it (D125: the kill switch asks first).
func (in *Inbox) terminate(w http.ResponseWriter, r *http.Request, s *session) {
	agent := r.PathValue("agent")
	if r.PostFormValue("confirm") != "yes" {
		in.fail(w, r, http.StatusBadRequest, "bad_request", "tick the box that confirms the kill: it cannot be undone")
		return
	}
	if err := in.b.Terminate(r.Context(), s.p.Name, agent, strings.TrimSpace(r.PostFormValue("note"))); err != nil {
		in.failErr(w, r, err)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]string{"message": "Agent " + agent + " terminated."})
		return
	}
	http.Redirect(w, r, "/agents/"+pathEscape(agent), http.StatusSeeOther)
}

// since says how long ago, in the largest whole unit.
func since(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// arith is a + sign*b for the templates' geometry: ints stay ints (an index),
// anything else is a float.
func arith(a, b any, sign int) any {
	ai, aok := asInt(a)
	bi, bok := asInt(b)
	if aok && bok {
		return ai + int64(sign)*bi
	}
	return asFloat(a) + float64(sign)*asFloat(b)
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), true
	}
	return 0, false
}

func asFloat(v any) float64 {
	if n, ok := asInt(v); ok {
		return float64(n)
	}
	if f, ok := v.(float64); ok {
		return f
	}
	return 0
}
