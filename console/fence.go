package console

import (
	"context"
	"net/http"
	"time"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/lease/pglease"
)

// refusalsShown bounds the refusals the Fence page lists.
const refusalsShown = 100

// fenceData is the Fence page: the resources with their counts, and the
// newest refusals of the refusal log (of one lease key, with ?key=).
type fenceData struct {
	section[fenceRow]
	NoLog    bool   // the refusal log is missing (a schema before fence's version 4)
	Table    string // the fence table (Config.FenceTable)
	Key      string // the lease key the refusals are filtered by ("": all)
	Job      string // the schedule the refusals are filtered by ("": all)
	Resource string // the resource the refusals are filtered by ("": all)
	Refusals []refusalRow
}

// refusalRow is a refusal as the page shows it, its writer resolved and
// its links made.
type refusalRow struct {
	fence.RefusalEntry
	// Writer names who wrote: the node a scheduler ran the write on, or a
	// lease's holder from the grant history or the lease row. WriterFrom
	// says where it was read; Unknown why a lease's holder could not be
	// read (the Lockers run without History).
	Writer      string
	WriterFrom  string
	Unknown     string
	LeaseLink   string // the lease key's page
	AttemptLink string // the schedule's page
	Trace       string // the trace, through Config.TraceURL
}

func (s *Server) fence(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := fenceData{Key: r.URL.Query().Get("key"), Job: r.URL.Query().Get("job"), Resource: r.URL.Query().Get("resource"), Table: s.st.fences.Table()}
	ok, refusals, err := s.st.fences.Tables(ctx, s.st.db)
	if err != nil {
		s.fail(w, err)
		return
	}
	if !ok {
		d.Missing = s.st.fences.Table()
		s.render(w, r, "fence", "Fence", d)
		return
	}
	if d.Rows, err = s.st.fence(ctx, refusals); err != nil {
		s.fail(w, err)
		return
	}
	logged, err := s.st.fences.LogTable(ctx, s.st.db)
	if err != nil {
		s.fail(w, err)
		return
	}
	d.NoLog = !logged
	if logged {
		if d.Refusals, err = s.refusals(ctx, &fence.RefusalFilter{Key: d.Key, Schedule: d.Job, Resource: d.Resource}, refusalsShown); err != nil {
			s.fail(w, err)
			return
		}
	}
	s.render(w, r, "fence", "Fence", d)
}

// refusals reads the newest refusals of the log and names their writers.
func (s *Server) refusals(ctx context.Context, f *fence.RefusalFilter, limit int) ([]refusalRow, error) {
	es, err := s.st.fences.RefusalLog(ctx, s.st.db, f, limit)
	if err != nil {
		return nil, err
	}
	h := holders{st: s.st, grants: map[string][]pglease.Grant{}}
	out := make([]refusalRow, 0, len(es))
	for _, e := range es {
		row := refusalRow{RefusalEntry: e, Trace: traceLink(s.cfg.TraceURL, e.TraceID)}
		if e.Key != "" {
			row.LeaseLink = "/leases/" + segment(e.Key)
		}
		if e.Schedule != "" {
			row.AttemptLink = "/schedules/" + segment(e.Schedule)
		}
		switch {
		case e.Node != "":
			row.Writer, row.WriterFrom = e.Node, "the scheduler's handler that wrote it"
		case e.Key != "":
			if row.Writer, row.WriterFrom, row.Unknown, err = h.of(ctx, e.Key, e.Token); err != nil {
				return nil, err
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// holders finds the holder a lease key's token was granted to: in the
// grant history (pglease.Config.History), or in the lease row when its
// token is that one. Each key's history is read once per page.
type holders struct {
	st      *store
	checked bool
	lease   bool // the lease table is in this database (pglease, sqlitelease)
	history bool
	grants  map[string][]pglease.Grant
}

// of returns the holder key's token was granted to and where it was read,
// or why it is not known.
func (h *holders) of(ctx context.Context, key string, token aegis.Token) (holder, from, unknown string, err error) {
	if !h.checked {
		if h.lease, h.history, err = h.st.leaseTables.Tables(ctx); err != nil {
			return "", "", "", err
		}
		h.checked = true
	}
	if !h.lease {
		return "", "", "not known: the lease is not in this database's lease table (another backend's)", nil
	}
	if h.history {
		gs, ok := h.grants[key]
		if !ok {
			if gs, err = h.st.leaseTables.Grants(ctx, key, grantsShown); err != nil {
				return "", "", "", err
			}
			h.grants[key] = gs
		}
		for _, g := range gs {
			if g.Token == token && g.Holder != "" {
				return g.Holder, "the lease's grant history", "", nil
			}
		}
	}
	k, ok, err := h.st.leaseTables.Key(ctx, key)
	if err != nil {
		return "", "", "", err
	}
	if ok && k.Token == token && k.Holder != "" {
		return k.Holder, "the lease row", "", nil
	}
	if h.history {
		return "", "", "not known: the grant history no longer has this token (or it was granted without a holder name)", nil
	}
	return "", "", "not recorded: turn on History", nil
}

// The overview's windows of refusals.
const (
	refusalHour = time.Hour
	refusalDay  = 24 * time.Hour
)
