// Package console is `aegis console`: an operator's web console over a
// production database of Aegis (PostgreSQL, or SQLite for one host). It
// shows who holds which lease key with which token, the schedule catalog
// with each schedule's handler status, last success and failure, misses
// and next fire, its stuck runs, every attempt of its ticks (filtered by
// outcome, schedule and time; linked to their traces with
// Config.TraceURL) and its missed ticks with their cause, the queue's
// jobs, and the fence's resources and the writes it refused (with their
// writer), and lets an operator pause, resume and
// run now a schedule, and retry, cancel or discard a job, after a
// confirmation. Its overview counts the attempts whose lease was lost or
// whose outcome the fence refused, and the ticks that ran twice (executed)
// and that were applied twice (their effect landed twice), in the last
// hour and day: docs/console.md defines these words, and the pages use
// each for one thing only.
//
// Access: a console on a loopback address serves loopback names only; on
// any other address it needs a token or a user and password on every
// request. Changes are POSTs from its own forms, checked against a CSRF
// field and the request's origin; ReadOnly hides and refuses them. The
// store's URL, passwords and lease owners never reach a page or a log.
//
// A service mounts the handler in its own mux under Config.Prefix, on the
// *sql.DB it already has; behind its own authentication middleware it sets
// Config.CallerAuthenticates, and the console's checks of a change stay
// (see the example, and examples/admin for the whole program).
package console

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
	"github.com/aegislab/aegis/internal/webaccess"
	"github.com/aegislab/aegis/schedule"
)

// Config configures a Server.
type Config struct {
	// DB is the store of record: PostgreSQL through pgx's database/sql
	// driver, or SQLite (sqlitelease.Open). Required.
	DB *sql.DB
	// Addr is where the console listens (host:port): a non-loopback one
	// needs Token or User.
	Addr string
	// Namespace is the schedule catalog's namespace. Default "default".
	Namespace string
	// Token, when set, is required on every request (a Bearer header, or
	// the cookie set by opening the console with ?token=).
	Token string
	// User and Password, when set, are HTTP basic authentication.
	User, Password string
	// ReadOnly hides every control that changes something, and refuses
	// the changes.
	ReadOnly bool
	// TraceURL, when set, links an attempt of a schedule to its trace: an
	// http or https URL with TracePlaceholder where the attempt's trace id
	// goes, such as http://localhost:16686/trace/{trace_id} (Jaeger's UI).
	// It may not carry a user or password (every page would show them).
	// Default: none, the trace id is shown as text.
	TraceURL string
	// Logger logs refused requests and failed queries (never a secret).
	// Default: discard.
	Logger *slog.Logger
	// Prefix is the path the handler is mounted under in a program's own
	// mux, such as "/admin/aegis" (mux.Handle("/admin/aegis/", srv)): every
	// link and redirect of its pages starts with it, and a request outside
	// it is not found; the handler gets the whole path (no
	// http.StripPrefix). It starts with "/", does not end with one, has no
	// empty, . or .. element, and needs no escaping (letters, digits and
	// -._~$&+,:;=@). Default: "", the console owns the whole path.
	Prefix string
	// CallerAuthenticates says the program serves the handler behind its
	// own authentication, a middleware that refuses a request before it
	// reaches the console. The console then asks for no Token or User and
	// checks neither Addr nor the Host; the checks of a change (a POST from
	// its own form, its CSRF field, no cross-site origin) and ReadOnly
	// stay. Default false: the console's own access rules apply.
	CallerAuthenticates bool
	// QueueTable is the queue's job table whose pages the console shows
	// (queue.Config.Table: optionally schema-qualified, the queue's other
	// tables named from it). Default queue.DefaultTable ("aegis_job").
	QueueTable string
	// FenceTable is the fence table whose resources and refusals the
	// console shows (fence.Config.Table). Default fence.DefaultTable
	// ("aegis_fence").
	FenceTable string
}

// Server is the console's HTTP handler.
type Server struct {
	cfg   Config
	st    *store
	csrf  string
	log   *slog.Logger
	mux   *http.ServeMux
	pages *template.Template // with base returning cfg.Prefix
}

// nav is a link of the header.
type nav struct{ Name, Path, Label string }

var navs = []nav{{"overview", "/", "Overview"}, {"leases", "/leases", "Leases"}, {"schedules", "/schedules", "Schedules"}, {"queue", "/queue", "Queue"}, {"fence", "/fence", "Fence"}}

//go:embed assets
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"ago":      ago,
	"left":     left,
	"instant":  instant,
	"when":     when,
	"rows":     func(now time.Time, class string, rs any) rows { return rows{Now: now, Class: class, Rows: rs} },
	"segment":  segment,
	"joinList": func(s []string) string { return strings.Join(s, ", ") },
	"navs":     func() []nav { return navs },
	"base":     func() string { return "" }, // each Server's own: its Prefix
}).ParseFS(assets, "assets/*.html"))

// New checks cfg and returns a Server. Its errors wrap aegis.ErrInvalid
// and name the field.
func New(ctx context.Context, cfg *Config) (*Server, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: console: Config is nil", aegis.ErrInvalid)
	}
	c := *cfg
	switch {
	case c.DB == nil:
		return nil, fmt.Errorf("%w: console: Config.DB is nil", aegis.ErrInvalid)
	case (c.User == "") != (c.Password == ""):
		return nil, fmt.Errorf("%w: console: Config.User and Config.Password go together (basic authentication)", aegis.ErrInvalid)
	case strings.ContainsRune(c.User, ':'):
		return nil, fmt.Errorf("%w: console: Config.User may not contain ':'", aegis.ErrInvalid)
	case checkPrefix(c.Prefix) != "":
		return nil, fmt.Errorf("%w: console: Config.Prefix %q: %s", aegis.ErrInvalid, c.Prefix, checkPrefix(c.Prefix))
	case c.CallerAuthenticates && (c.Token != "" || c.User != ""):
		return nil, fmt.Errorf("%w: console: Config.CallerAuthenticates goes without Token, User and Password: the program's own authentication is the only one", aegis.ErrInvalid)
	case !c.CallerAuthenticates && c.Token == "" && c.User == "" && !webaccess.Loopback(c.Addr):
		return nil, fmt.Errorf("%w: console: address %q is not loopback: set a token or a user and password, so that not everyone who reaches it can read it", aegis.ErrInvalid, c.Addr)
	}
	if err := CheckTraceURL(c.TraceURL); err != nil {
		return nil, fmt.Errorf("%w: console: Config.TraceURL %w", aegis.ErrInvalid, err)
	}
	c.Namespace = cmp.Or(c.Namespace, schedule.DefaultNamespace)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	d, err := migrate.Detect(ctx, c.DB)
	if err != nil {
		return nil, fmt.Errorf("console: the store: %w", err)
	}
	st, err := newStore(ctx, c.DB, d, c)
	if err != nil {
		return nil, fmt.Errorf("console: the store: %w", err)
	}
	s := &Server{cfg: c, st: st, csrf: webaccess.NewToken(), log: c.Logger, mux: http.NewServeMux()}
	prefix := c.Prefix
	s.pages = template.Must(pages.Clone()).Funcs(template.FuncMap{"base": func() string { return prefix }})
	s.mux.HandleFunc("GET /{$}", s.overview)
	s.mux.HandleFunc("GET /leases", s.leases)
	s.mux.HandleFunc("GET /leases/{key...}", s.leaseDetail)
	s.mux.HandleFunc("GET /schedules", s.schedules)
	s.mux.HandleFunc("GET /schedules/{name}", s.scheduleDetail)
	s.mux.HandleFunc("GET /schedules/{name}/{op}", s.confirm)
	s.mux.HandleFunc("POST /schedules/{name}/{op}", s.edit)
	s.mux.HandleFunc("GET /queue", s.queuePage)
	s.mux.HandleFunc("GET /queue/jobs", s.jobs)
	s.mux.HandleFunc("GET /queue/jobs/{id}", s.job)
	s.mux.HandleFunc("GET /queue/jobs/{id}/{op}", s.jobConfirm)
	s.mux.HandleFunc("POST /queue/jobs/{id}/{op}", s.jobEdit)
	s.mux.HandleFunc("GET /fence", s.fence)
	s.mux.HandleFunc("GET /style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		b, _ := assets.ReadFile("assets/style.css")
		_, _ = w.Write(b)
	})
	return s, nil
}

// ServeHTTP applies the access rules, then serves the page.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'none'; frame-ancestors 'none'")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on the console's own form posts, which the origin
	// check must refuse.
	w.Header().Set("Referrer-Policy", "same-origin")
	if s.cfg.Token != "" {
		// The first visit's ?token= becomes a cookie, and the address
		// loses it: it would stay in the history and in Referer headers.
		if t := r.URL.Query().Get("token"); t != "" && webaccess.Equal(t, s.cfg.Token) && r.Method == http.MethodGet {
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: t, Path: cmp.Or(s.cfg.Prefix, "/"), HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
	}
	if no := s.authenticate(r); no != nil {
		s.log.Warn("console: request refused", "method", r.Method, "path", r.URL.Path, "status", no.status, "why", no.msg)
		if no.status == http.StatusUnauthorized && s.cfg.User != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="aegis console", charset="UTF-8"`)
		}
		http.Error(w, no.msg, no.status)
		return
	}
	if bad := badText(r); bad != "" {
		http.Error(w, bad, http.StatusBadRequest)
		return
	}
	if s.cfg.Prefix == "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	// The prefix is matched as sent (escaped), as a ServeMux matches its
	// patterns: New took a prefix that is its own escaped form.
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), s.cfg.Prefix)
	switch {
	case !ok || (rest != "" && !strings.HasPrefix(rest, "/")):
		http.NotFound(w, r)
		return
	case rest == "":
		http.Redirect(w, r, s.cfg.Prefix+"/", http.StatusMovedPermanently)
		return
	case cleanPath(rest) != rest:
		// A program's ServeMux cleans a path before it routes, but a
		// handler served by itself gets it as sent, and the inner mux's
		// redirect to the clean path would drop the prefix.
		to := s.cfg.Prefix + cleanPath(rest)
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, to, http.StatusTemporaryRedirect)
		return
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, s.cfg.Prefix)
	if r.URL.RawPath != "" {
		r2.URL.RawPath = rest
	}
	s.mux.ServeHTTP(w, r2)
}

// cleanPath is p without . and .. elements and repeated slashes, its
// trailing slash kept, as http.ServeMux cleans a path.
func cleanPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// checkPrefix says what is wrong with Config.Prefix, or "".
func checkPrefix(p string) string {
	switch {
	case p == "":
		return ""
	case !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/"):
		return "want a path that starts with / and does not end with one, such as /admin/aegis"
	case path.Clean(p) != p:
		return "want a clean path: no empty, . or .. element"
	case (&url.URL{Path: p}).EscapedPath() != p:
		return "want a path of letters, digits and -._~$&+,:;=@ between slashes, which needs no escaping"
	}
	return ""
}

// badText says which part of the request's address is not text a store
// takes (valid UTF-8 without NUL), or "". The names, keys and queues of
// the addresses go into queries as text, which PostgreSQL refuses
// (SQLSTATE 22021): that is the request's mistake (400), not a failure of
// the store (500).
func badText(r *http.Request) string {
	text := func(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
	if !text(r.URL.Path) {
		return "the address's path is not valid UTF-8 without NUL"
	}
	for k, vs := range r.URL.Query() {
		for _, v := range vs {
			if !text(k) || !text(v) {
				return fmt.Sprintf("the address's parameter %.40q is not valid UTF-8 without NUL", k)
			}
		}
	}
	return ""
}

// notices are what a page says after a change redirected to it.
var notices = map[string]string{
	"paused":  "Paused: no replica starts a tick of it from now on",
	"resumed": "Resumed: the replicas run it from its next tick",
	"run-now": "Run now requested: one replica runs it within a second or so; its run appears below with its node and token",
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	ReadOnly bool
	CSRF     string
	Now      time.Time
	Notice   string
	Data     any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	s.renderPage(w, r, name, name, notices, title, data)
}

// renderPage renders template name under the header's link nav, with the
// notice of the request's ?done= from notices.
func (s *Server) renderPage(w http.ResponseWriter, r *http.Request, name, nav string, notices map[string]string, title string, data any) {
	p := page{Title: title, Nav: nav, ReadOnly: s.cfg.ReadOnly, CSRF: s.csrf, Data: data, Notice: notices[r.URL.Query().Get("done")]}
	now, err := s.st.now(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	p.Now = now
	var b strings.Builder
	if err := s.pages.ExecuteTemplate(&b, name+".html", p); err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// fail answers a failed query. The driver's error can quote a statement,
// never the URL; it is shown to the operator, who needs it.
func (s *Server) fail(w http.ResponseWriter, err error) {
	s.log.Error("console: query failed", "err", err)
	http.Error(w, "the console could not read the store: "+err.Error(), http.StatusInternalServerError)
}

// The lease table a page names when the database does not have it (the
// owner's default, which the console reads).
const leaseTable = "aegis_lease"

// section is a table the database may not have.
type section[T any] struct {
	Missing string // the table that is missing, when it is
	Rows    []T
}

// overviewData is the overview's cards: each part's in its own file
// (overview_*.go) and template (overview_*.html).
type overviewData struct {
	Leases, LiveLeases int
	Sched              schedCards
	Queue              queueCards
	Fence              fenceCards
	Missing            []string
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now, err := s.st.now(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	var d overviewData
	if ok, _, err := s.st.leaseTables.Tables(ctx); err != nil {
		s.fail(w, err)
		return
	} else if ok {
		ls, err := s.st.leases(ctx, now)
		if err != nil {
			s.fail(w, err)
			return
		}
		d.Leases = len(ls)
		for _, l := range ls {
			if l.Live {
				d.LiveLeases++
			}
		}
	} else {
		d.Missing = append(d.Missing, leaseTable)
	}
	if d.Sched, err = s.schedCards(ctx, now); err != nil {
		s.fail(w, err)
		return
	}
	if d.Sched.NoCatalog {
		d.Missing = append(d.Missing, "aegis_schedule")
	}
	if d.Queue, err = s.queueCards(ctx, now); err != nil {
		s.fail(w, err)
		return
	}
	if d.Fence, err = s.fenceCards(ctx, now); err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, r, "overview", "Overview", d)
}

// scheduleRow is an entry of the catalog as the page shows it.
type scheduleRow struct {
	schedule.Entry
	Next time.Time // zero: paused, or no replica runs it
	// Health is its last success, last failure and misses of the last
	// hour; nil without the attempt and missed tables.
	Health *schedule.Health
}

// Unbound tells that no live replica has the entry's handler: none runs it.
func (r scheduleRow) Unbound() bool { return len(r.Replicas) == 0 }

type schedulesData struct {
	Missing string
	NoRuns  bool
	Entries []scheduleRow
	// Unreadable are the catalog rows the catalog cannot read (a hand
	// edit, a newer version's), shown with why among the others.
	Unreadable []schedule.RowError
	Stuck      []runRow
	// Runs are the run table's latest rows, shown when the attempt history
	// is missing (an old database).
	Runs []runRow
	history
	Selected string
	// Query is the page's filter; Jobs the names its form offers.
	Query attemptQuery
	Jobs  []string
}

func (s *Server) schedulesData(ctx context.Context, q attemptQuery) (schedulesData, error) {
	d := schedulesData{Query: q, Selected: q.Job}
	job := q.Job
	now, err := s.st.now(ctx)
	if err != nil {
		return d, err
	}
	cat, err := s.st.catalog(ctx)
	if err != nil {
		return d, err
	}
	if cat == nil {
		d.Missing = "aegis_schedule"
	} else {
		es, err := cat.List(ctx)
		var bad *schedule.BadRowsError
		switch {
		case errors.As(err, &bad):
			for _, r := range bad.Rows {
				if job == "" || r.Name == job {
					d.Unreadable = append(d.Unreadable, r)
				}
			}
		case err != nil && !errors.Is(err, schedule.ErrNotFound):
			return d, err
		}
		for _, e := range es {
			d.Jobs = append(d.Jobs, e.Name)
			row := scheduleRow{Entry: e}
			if (job == "" || e.Name == job) && q.handles(row) {
				if !row.Unbound() {
					row.Next = nextFire(e, now)
				}
				d.Entries = append(d.Entries, row)
			}
		}
	}
	ok, err := s.st.runTable.Exists(ctx)
	if err != nil {
		return d, err
	}
	d.NoRuns = !ok
	if ok {
		runs, err := s.st.runs(ctx, now, job, 100)
		if err != nil {
			return d, err
		}
		if d.Stuck, _, err = s.st.stuck(ctx, job); err != nil {
			return d, err
		}
		d.Runs = runs
		if d.history, err = s.st.history(ctx, now, q, s.cfg.TraceURL); err != nil {
			return d, err
		}
		stuck := func(as []attemptRow) {
			for i, a := range as {
				as[i].Stuck = a.Outcome == "running" && slices.ContainsFunc(d.Stuck, func(r runRow) bool {
					return r.Job == a.Job && r.Fire.Equal(a.Fire) && r.Token == a.Token
				})
			}
		}
		stuck(d.Attempts)
		stuck(d.Trouble)
		if d.NoAttempts == "" && d.NoMissed == "" {
			for i := range d.Entries {
				h, err := s.st.runTable.Health(ctx, d.Entries[i].Name, now.Add(-missedWindow))
				if err != nil {
					return d, err
				}
				d.Entries[i].Health = &h
			}
		}
	}
	return d, nil
}

// readSchedules reads the data of a schedules' page, of the schedule
// name ("" for every one) with the request's filter; false when it
// answered the request with an error.
func (s *Server) readSchedules(w http.ResponseWriter, r *http.Request, name string) (schedulesData, bool) {
	q, bad := parseAttemptQuery(r, name)
	if bad != "" {
		http.Error(w, bad, http.StatusBadRequest)
		return schedulesData{}, false
	}
	d, err := s.schedulesData(r.Context(), q)
	switch {
	case errors.Is(err, aegis.ErrInvalid): // a name no schedule can have
		http.Error(w, err.Error(), http.StatusBadRequest)
		return d, false
	case err != nil:
		s.fail(w, err)
		return d, false
	}
	return d, true
}

func (s *Server) schedules(w http.ResponseWriter, r *http.Request) {
	if d, ok := s.readSchedules(w, r, ""); ok {
		s.render(w, r, "schedules", "Schedules", d)
	}
}

func (s *Server) scheduleDetail(w http.ResponseWriter, r *http.Request) {
	name := unsegment(r.PathValue("name"))
	d, ok := s.readSchedules(w, r, name)
	if !ok {
		return
	}
	// A schedule its replicas declare in code is not in the catalog: it
	// has a page when the store has a run, an attempt or a missed tick of
	// it.
	if len(d.Entries) == 0 && len(d.Unreadable) == 0 && len(d.Runs) == 0 && len(d.Attempts) == 0 && len(d.Missed) == 0 {
		http.Error(w, fmt.Sprintf("no schedule %q in namespace %q", name, s.cfg.Namespace), http.StatusNotFound)
		return
	}
	s.render(w, r, "schedules", "Schedule "+name, d)
}

// ops are the schedule edits: what the confirmation asks, what it does,
// and the notice the page shows after it.
var ops = map[string]struct {
	verb, question, done string
	do                   func(*schedule.Catalog, context.Context, string) (schedule.Entry, error)
}{
	"pause":  {"Pause", "No replica starts a tick of %q from the moment it is paused; runs already going finish.", "paused", (*schedule.Catalog).Pause},
	"resume": {"Resume", "The replicas run %q again from its next tick; ticks missed while paused are not run.", "resumed", (*schedule.Catalog).Resume},
	"run-now": {"Run now", "One extra run of %q starts as soon as the replicas see the request, on one of them, with its own fencing token, as a tick would (its overlap policy applies); its regular ticks do not move.",
		"run-now", (*schedule.Catalog).RunNow},
}

type confirmData struct {
	Name, Op, Verb, Question string
}

func (s *Server) confirm(w http.ResponseWriter, r *http.Request) {
	name, op := unsegment(r.PathValue("name")), r.PathValue("op")
	o, ok := ops[op]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if s.cfg.ReadOnly {
		http.Error(w, "this console is read-only", http.StatusForbidden)
		return
	}
	s.render(w, r, "confirm", o.verb+" "+name+"?", confirmData{Name: name, Op: op, Verb: o.verb, Question: fmt.Sprintf(o.question, name)})
}

func (s *Server) edit(w http.ResponseWriter, r *http.Request) {
	if no := s.checkMutation(r); no != nil {
		s.log.Warn("console: change refused", "path", r.URL.Path, "why", no.msg)
		http.Error(w, no.msg, no.status)
		return
	}
	name, op := unsegment(r.PathValue("name")), r.PathValue("op")
	o, ok := ops[op]
	if !ok {
		http.NotFound(w, r)
		return
	}
	cat, err := s.st.catalog(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	if cat == nil {
		http.Error(w, "this database has no schedule catalog", http.StatusNotFound)
		return
	}
	e, err := o.do(cat, r.Context(), name)
	switch {
	case errors.Is(err, schedule.ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, schedule.ErrPaused):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		s.fail(w, err)
		return
	}
	s.log.Info("console: schedule edited", "op", op, "schedule", name, "version", e.Version)
	http.Redirect(w, r, s.cfg.Prefix+"/schedules/"+segment(name)+"?done="+o.done, http.StatusSeeOther)
}
