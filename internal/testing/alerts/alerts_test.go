package alerts_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aegislab/aegis/internal/testing/alerts"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rulesPath and dashboardPath are docs/alerts/aegis-rules.yml and
// docs/grafana-aegis.json from this package's directory.
const (
	rulesPath     = "../../../docs/alerts/aegis-rules.yml"
	dashboardPath = "../../../docs/grafana-aegis.json"
)

// labels is an alert's labels, as its expression gives them.
type labels = map[string]string

// testedInSchedule are the alerts on events the scheduler does not emit
// yet (EventMissed, EventTwice): schedule/metrics_internal_test.go feeds
// those events through a real scheduler's emit and runs the alerts on the
// scrape. Once the scheduler emits them, their test belongs here.
var testedInSchedule = []string{"AegisScheduleMissedTicks", "AegisScheduleUnbound", "AegisScheduleRanTwice"}

func TestRulesPassPromtoolCheck(t *testing.T) {
	t.Parallel()
	require.NoError(t, alerts.Check(rulesPath))
}

// Every alert of the file fires in a test of real scrapes: this package's
// scenarios, or the scheduler's own test for the events it does not emit
// yet. Each names its schedule (namespace and schedule) or its queue and
// kind, and has a severity, a summary and a description.
func TestEveryAlertIsTested(t *testing.T) {
	t.Parallel()
	rules, err := alerts.ReadRules(rulesPath)
	require.NoError(t, err)
	require.NotEmpty(t, rules)
	tested := slices.Clone(testedInSchedule)
	for _, fire := range []map[string][]labels{scheduleFaults, queueFaults} {
		for name, alerts := range fire {
			require.NotEmpty(t, alerts, "%s: a case expects it to fire", name)
			tested = append(tested, name)
		}
	}
	for _, r := range rules {
		require.Contains(t, tested, r.Alert, "alert %s fires in no test", r.Alert)
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], "alert %s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "alert %s", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "alert %s", r.Alert)
		names := "{{ $labels.schedule }}"
		switch {
		case strings.HasPrefix(r.Alert, "AegisQueue"):
			names = "{{ $labels.kind }}"
			require.Contains(t, r.Annotations["summary"], "{{ $labels.queue }}", "alert %s", r.Alert)
		case r.Alert == "AegisScheduleHandlersMissing":
			names = "{{ $labels.namespace }}" // aegis_schedule_unhandled has no schedule label
		}
		require.Contains(t, r.Annotations["summary"], names, "alert %s: its summary names what it is about", r.Alert)
	}
	for _, name := range tested {
		require.True(t, slices.ContainsFunc(rules, func(r alerts.Rule) bool { return r.Alert == name }), "%s is tested and not in the rules", name)
	}
}

// Without promtool the tests fail, and say how to install it: CI runs
// them on a fresh machine after scripts/services start.
func TestWithoutPromtoolTheErrorSaysHowToInstallIt(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := alerts.Promtool()
	require.ErrorContains(t, err, "run scripts/services start")
	require.ErrorContains(t, alerts.Check(rulesPath), "run scripts/services start")
	require.ErrorContains(t, alerts.Test(rulesPath, alerts.Case{Name: "any"}), "run scripts/services start")
}

// A test of the tests: an alert expected to fire that does not, or one
// that fires unexpected, fails the case, with promtool's word.
func TestAWrongExpectationFails(t *testing.T) {
	t.Parallel()
	failed := []alerts.Sample{{Series: `aegis_schedule_failed_total{namespace="default",node="n1",schedule="x"}`, Value: 0}}
	failedNow := []alerts.Sample{{Series: failed[0].Series, Value: 3}}
	err := alerts.Test(rulesPath, alerts.Case{Name: "silent", Scrapes: [][]alerts.Sample{failed, failed},
		Fire: map[string][]labels{"AegisScheduleRunsFailing": {{"namespace": "default", "schedule": "x"}}}})
	require.ErrorContains(t, err, "AegisScheduleRunsFailing")
	err = alerts.Test(rulesPath, alerts.Case{Name: "unexpected", Scrapes: [][]alerts.Sample{failed, failedNow}})
	require.ErrorContains(t, err, "AegisScheduleRunsFailing")
	require.NoError(t, alerts.Test(rulesPath, alerts.Case{Name: "expected", Scrapes: [][]alerts.Sample{failed, failedNow},
		Fire: map[string][]labels{"AegisScheduleRunsFailing": {{"namespace": "default", "schedule": "x"}}}}))
	err = alerts.Test(rulesPath, alerts.Case{Name: "no such alert", Scrapes: [][]alerts.Sample{failed},
		Fire: map[string][]labels{"AegisNoSuchAlert": {{}}}})
	require.ErrorContains(t, err, "the rules have no such alert")
}

// metricNames are the aegis_ metric names an expression reads.
func metricNames(expr string) []string {
	return regexp.MustCompile(`aegis_[a-z_]+`).FindAllString(expr, -1)
}

// requireReadScraped checks that every metric of prefix the rules read, and
// those the Grafana dashboard's panels read that inPanels takes, are in the
// scrapes: no alert or panel waits on a metric nobody exports. (A counter
// vector has no series until it counts: the queue's panels on counters of
// faults are checked against queue/metrics.go's list, by
// lease/leasemetrics's test.)
func requireReadScraped(t *testing.T, prefix string, inPanels func(metric string) bool, scrapes ...[]alerts.Sample) {
	t.Helper()
	have := map[string]bool{}
	for _, s := range scrapes {
		for _, sample := range s {
			have[sample.Series[:strings.IndexByte(sample.Series, '{')]] = true
		}
	}
	rules, err := alerts.ReadRules(rulesPath)
	require.NoError(t, err)
	n := 0
	check := func(where, expr string, take func(string) bool) {
		for _, name := range metricNames(expr) {
			if strings.HasPrefix(name, prefix) && take(name) {
				n++
				require.True(t, have[name], "%s reads %s, which the scrape does not have", where, name)
			}
		}
	}
	for _, r := range rules {
		check("alert "+r.Alert, r.Expr, func(string) bool { return true })
	}
	for expr, title := range dashboard(t) {
		check("panel "+title, expr, inPanels)
	}
	require.NotZero(t, n, "the rules and the dashboard read metrics of %s", prefix)
}

// dashboard is the Grafana dashboard's expressions, to their panel's title.
func dashboard(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			out[target.Expr] = p.Title
		}
	}
	require.NotEmpty(t, out)
	return out
}
