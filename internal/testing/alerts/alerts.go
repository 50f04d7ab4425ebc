// Package alerts tests Prometheus alerting rules (docs/alerts/aegis-rules.yml)
// against what Aegis's registries really export, with promtool: Check runs
// `promtool check rules`; Scrape reads a registry as Prometheus scrapes it
// (HTTP, the text exposition format); Test turns scrapes into the input
// series of a `promtool test rules` unit test, one minute apart, and
// expects each rule of the file to fire exactly the alerts a Case names
// (none for a healthy scrape).
//
// promtool comes in Debian's prometheus package, which scripts/services
// installs (without starting a Prometheus server); without it every
// function fails and says so. Annotations may use {{ $labels.NAME }} and no
// other template: Test renders them to state the expected alerts exactly.
package alerts

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Promtool returns promtool's path, or an error that says how to install
// it.
func Promtool() (string, error) {
	p, err := exec.LookPath("promtool")
	if err != nil {
		return "", errors.New("alerts: promtool is not installed: run scripts/services start (as root it installs Debian's prometheus package, which has promtool; make test runs it)")
	}
	return p, nil
}

// Check runs `promtool check rules` on the rules file at path.
func Check(path string) error {
	promtool, err := Promtool()
	if err != nil {
		return err
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("alerts: promtool check rules %s: %w\n%s", path, err, out)
	}
	return nil
}

// Rule is an alerting rule of a rules file.
type Rule struct {
	Alert       string
	Expr        string
	For         time.Duration
	Labels      map[string]string
	Annotations map[string]string
}

// ReadRules reads the alerting rules of the rules file at path (recording
// rules are left out).
func ReadRules(path string) ([]Rule, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("alerts: %s: %w", path, err)
	}
	var rules []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			d := model.Duration(0)
			if r.For != "" {
				if d, err = model.ParseDuration(r.For); err != nil {
					return nil, fmt.Errorf("alerts: %s: alert %s: for: %w", path, r.Alert, err)
				}
			}
			rules = append(rules, Rule{Alert: r.Alert, Expr: r.Expr, For: time.Duration(d), Labels: r.Labels, Annotations: r.Annotations})
		}
	}
	return rules, nil
}

// Sample is one sample of a scrape: its series, name{label="value",...}
// with the labels sorted, and its value.
type Sample struct {
	Series string
	Value  float64
}

// Scrape reads g as Prometheus does: over HTTP (promhttp, a test server on
// loopback), in the text exposition format, parsed back into samples (a
// histogram's _bucket, _sum and _count). A failed Gather fails the scrape.
func Scrape(g prometheus.Gatherer) ([]Sample, error) {
	srv := httptest.NewServer(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := srv.Client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("alerts: scrape: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("alerts: scrape: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("alerts: scrape: %s: %s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("alerts: scrape: Content-Type %q, not the text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("alerts: scrape: parse the text format: %w", err)
	}
	var out []Sample
	for _, mf := range mfs {
		out = append(out, samples(mf)...)
	}
	slices.SortFunc(out, func(a, b Sample) int { return strings.Compare(a.Series, b.Series) })
	return out, nil
}

// samples are a metric family's samples, as Prometheus stores them.
func samples(mf *dto.MetricFamily) []Sample {
	var out []Sample
	name := mf.GetName()
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		add := func(suffix string, v float64, extra ...string) {
			ls := withLabels(labels, extra...)
			out = append(out, Sample{Series: series(name+suffix, ls), Value: v})
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			add("", m.GetCounter().GetValue())
		case dto.MetricType_GAUGE:
			add("", m.GetGauge().GetValue())
		case dto.MetricType_UNTYPED:
			add("", m.GetUntyped().GetValue())
		case dto.MetricType_HISTOGRAM:
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				add("_bucket", float64(b.GetCumulativeCount()), "le", formatFloat(b.GetUpperBound()))
			}
			add("_bucket", float64(h.GetSampleCount()), "le", "+Inf")
			add("_sum", h.GetSampleSum())
			add("_count", float64(h.GetSampleCount()))
		case dto.MetricType_SUMMARY:
			s := m.GetSummary()
			for _, q := range s.GetQuantile() {
				add("", q.GetValue(), "quantile", formatFloat(q.GetQuantile()))
			}
			add("_sum", s.GetSampleSum())
			add("_count", float64(s.GetSampleCount()))
		}
	}
	return out
}

// withLabels copies labels and adds the name, value pairs of extra.
func withLabels(labels map[string]string, extra ...string) map[string]string {
	out := make(map[string]string, len(labels)+len(extra)/2)
	for k, v := range labels {
		out[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		out[extra[i]] = extra[i+1]
	}
	return out
}

// series writes a series selector: name{k="v",...}, labels sorted.
func series(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(labels[k])
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// formatFloat writes v as the text format and PromQL read it.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Case is one unit test of the rules: scrapes taken one minute apart (the
// last one held until every rule has been evaluated), and, per alert name,
// the alerts the rule must fire, each given by the labels of its
// expression's result (the rule's own labels are added). A rule not in
// Fire must fire nothing. Each rule is evaluated once its for has passed
// after the last scrape (a minute after it for a rule without for).
type Case struct {
	Name    string
	Scrapes [][]Sample
	Fire    map[string][]map[string]string
}

// Test runs each case as a `promtool test rules` unit test of the rules
// file at path. Its error names the case and holds promtool's output.
func Test(path string, cases ...Case) error {
	promtool, err := Promtool()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	rules, err := ReadRules(abs)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "aegis-alerts-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for i, c := range cases {
		file, err := unitTest(abs, rules, c)
		if err != nil {
			return fmt.Errorf("alerts: case %q: %w", c.Name, err)
		}
		name := filepath.Join(dir, fmt.Sprintf("case-%d.yml", i))
		if err := os.WriteFile(name, file, 0o644); err != nil {
			return err
		}
		if out, err := exec.Command(promtool, "test", "rules", name).CombinedOutput(); err != nil {
			return fmt.Errorf("alerts: case %q: promtool test rules: %w\n%s\nthe input series, one a minute:\n%s", c.Name, err, out, inputText(c.Scrapes))
		}
	}
	return nil
}
