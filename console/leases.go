package console

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/fence"
	"github.com/aegislab/aegis/lease/pglease"
)

// leasesData is the leases page: every key, and whether the grant history
// is there to link to.
type leasesData struct {
	Missing string // the lease table, when it is missing
	Rows    []leaseRow
	History bool // the grant history (aegis_lease_grant) exists
}

func (s *Server) leases(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var d leasesData
	ok, history, err := s.st.leaseTables.Tables(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	if !ok {
		d.Missing = leaseTable
		s.render(w, r, "leases", "Leases", d)
		return
	}
	d.History = history
	now, err := s.st.now(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	if d.Rows, err = s.st.leases(ctx, now); err != nil {
		s.fail(w, err)
		return
	}
	// Held keys first, the soonest to expire on top.
	slices.SortStableFunc(d.Rows, func(a, b leaseRow) int {
		switch {
		case a.Live != b.Live && a.Live:
			return -1
		case a.Live != b.Live:
			return 1
		case a.Live:
			return a.Expires.Compare(b.Expires)
		}
		return strings.Compare(a.Key, b.Key)
	})
	s.render(w, r, "leases", "Leases", d)
}

// leaseData is a key's page: its row and its recorded grants.
type leaseData struct {
	Lease   leaseRow
	History bool // the grant history (aegis_lease_grant) exists
	Grants  []pglease.Grant
	// Unrecorded is the newest recorded token when the key's token is
	// greater: the grants after it were made by Lockers without History.
	Unrecorded aegis.Token
	// Since is the oldest recorded token above 1: the grants before it
	// were trimmed, or made before the history was on.
	Since aegis.Token
	// RefusalLog: the fence's refusal log is there; Refusals are its
	// refusals of this key's holders (at most refusalsShown counted).
	RefusalLog   bool
	Refusals     int
	RefusalsMore bool // there may be more than Refusals
}

func (s *Server) leaseDetail(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := unsegment(r.PathValue("key"))
	ok, history, err := s.st.leaseTables.Tables(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	if !ok {
		s.render(w, r, "leases", "Leases", leasesData{Missing: leaseTable})
		return
	}
	now, err := s.st.now(ctx)
	if err != nil {
		s.fail(w, err)
		return
	}
	k, ok, err := s.st.leaseTables.Key(ctx, key)
	if err != nil {
		s.fail(w, err)
		return
	}
	if !ok {
		http.Error(w, fmt.Sprintf("no key %q in the lease table", key), http.StatusNotFound)
		return
	}
	d := leaseData{Lease: newLeaseRow(k, now), History: history}
	if d.History {
		if d.Grants, err = s.st.leaseTables.Grants(ctx, key, grantsShown); err != nil {
			s.fail(w, err)
			return
		}
		if len(d.Grants) > 0 {
			if newest := d.Grants[0].Token; newest < d.Lease.Token {
				d.Unrecorded = newest
			}
			if oldest := d.Grants[len(d.Grants)-1].Token; oldest > 1 {
				d.Since = oldest
			}
		}
	}
	if d.RefusalLog, err = s.st.fences.LogTable(ctx, s.st.db); err != nil {
		s.fail(w, err)
		return
	}
	if d.RefusalLog {
		rs, err := s.st.fences.RefusalLog(ctx, s.st.db, &fence.RefusalFilter{Key: key}, refusalsShown)
		if err != nil {
			s.fail(w, err)
			return
		}
		d.Refusals, d.RefusalsMore = len(rs), len(rs) == refusalsShown
	}
	s.renderPage(w, r, "lease", "leases", notices, "Lease "+key, d) // under the Leases link
}
