package console

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzTraceLink: a --trace-url that CheckTraceURL accepts makes, for every
// trace id (32 hex digits, as OpenTelemetry's are), a link that parses as
// an http or https URL without a user or password and carries the id; an
// id that is not hex makes no link.
func FuzzTraceLink(f *testing.F) {
	for _, s := range []string{
		"http://jaeger:16686/trace/{trace_id}", "https://grafana/explore?trace={trace_id}&x=1", "http://{trace_id}.traces.example/",
		"http://u:p@h/{trace_id}", "ftp://h/{trace_id}", "http:///{trace_id}", "{trace_id}", "http://h/%{trace_id}",
	} {
		f.Add(s, "<script>", uint64(0x4bf92f3577b34da6), uint64(0xa3ce929d0e0e4736))
	}
	f.Fuzz(func(t *testing.T, tmpl, other string, hi, lo uint64) {
		if CheckTraceURL(tmpl) != nil || tmpl == "" {
			return
		}
		if other == "" || strings.Trim(other, "0123456789abcdefABCDEF") != "" {
			require.Empty(t, traceLink(tmpl, other), "id %q is not hex", other)
		}
		id := fmt.Sprintf("%016x%016x", hi, lo)
		link := traceLink(tmpl, id)
		require.Contains(t, link, id)
		u, err := url.Parse(link)
		require.NoError(t, err, "the link of %q for %q", tmpl, id)
		require.Contains(t, []string{"http", "https"}, u.Scheme)
		require.NotEmpty(t, u.Host)
		require.Nil(t, u.User, "%q", link)
	})
}
