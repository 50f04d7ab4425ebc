package alerts

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// unitTest writes case c as a promtool unit test file of the rules at path
// (JSON, which YAML reads).
func unitTest(path string, rules []Rule, c Case) ([]byte, error) {
	if len(c.Scrapes) == 0 {
		return nil, fmt.Errorf("no scrape")
	}
	last := len(c.Scrapes) - 1
	end := last
	evalAt := map[string]int{} // minutes
	for _, r := range rules {
		m := last + int((r.For+time.Minute-1)/time.Minute) + 1
		evalAt[r.Alert] = m
		end = max(end, m)
	}
	type expAlert struct {
		Labels      map[string]string `json:"exp_labels"`
		Annotations map[string]string `json:"exp_annotations"`
	}
	type alertTest struct {
		EvalTime  string     `json:"eval_time"`
		Alertname string     `json:"alertname"`
		ExpAlerts []expAlert `json:"exp_alerts"`
	}
	var tests []alertTest
	for _, r := range rules {
		at := alertTest{EvalTime: fmt.Sprintf("%dm", evalAt[r.Alert]), Alertname: r.Alert, ExpAlerts: []expAlert{}}
		for _, labels := range c.Fire[r.Alert] {
			want := withLabels(labels)
			for k, v := range r.Labels {
				want[k] = v
			}
			annotations, err := render(r, want)
			if err != nil {
				return nil, err
			}
			at.ExpAlerts = append(at.ExpAlerts, expAlert{Labels: want, Annotations: annotations})
		}
		tests = append(tests, at)
	}
	for name := range c.Fire {
		if !slices.ContainsFunc(rules, func(r Rule) bool { return r.Alert == name }) {
			return nil, fmt.Errorf("alert %s is expected to fire, and the rules have no such alert", name)
		}
	}
	type group struct {
		Interval    string              `json:"interval"`
		InputSeries []map[string]string `json:"input_series"`
		AlertTests  []alertTest         `json:"alert_rule_test"`
	}
	file := struct {
		RuleFiles          []string `json:"rule_files"`
		EvaluationInterval string   `json:"evaluation_interval"`
		Tests              []group  `json:"tests"`
	}{[]string{path}, "1m", []group{{Interval: "1m", InputSeries: inputSeries(c.Scrapes, end), AlertTests: tests}}}
	return json.MarshalIndent(file, "", "  ")
}

// inputSeries are the scrapes as promtool's input series: scrape i at
// minute i, the last one held until minute end, "_" where a scrape lacks
// a series.
func inputSeries(scrapes [][]Sample, end int) []map[string]string {
	values := map[string][]string{}
	for i, scrape := range scrapes {
		for _, s := range scrape {
			if values[s.Series] == nil {
				values[s.Series] = slices.Repeat([]string{"_"}, len(scrapes))
			}
			values[s.Series][i] = formatFloat(s.Value)
		}
	}
	var out []map[string]string
	for _, name := range slices.Sorted(maps.Keys(values)) {
		v := values[name]
		for range end - (len(scrapes) - 1) {
			v = append(v, v[len(scrapes)-1])
		}
		out = append(out, map[string]string{"series": name, "values": strings.Join(v, " ")})
	}
	return out
}

// inputText lists the scrapes' series and their values, one a line.
func inputText(scrapes [][]Sample) string {
	var b strings.Builder
	for _, s := range inputSeries(scrapes, len(scrapes)-1) {
		fmt.Fprintf(&b, "%s  %s\n", s["series"], s["values"])
	}
	return b.String()
}

// labelRef is the one template an annotation may use.
var labelRef = regexp.MustCompile(`\{\{\s*\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// render is r's annotations for an alert of labels.
func render(r Rule, labels map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, text := range r.Annotations {
		var missing []string
		v := labelRef.ReplaceAllStringFunc(text, func(ref string) string {
			name := labelRef.FindStringSubmatch(ref)[1]
			val, ok := labels[name]
			if !ok {
				missing = append(missing, name)
			}
			return val
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("alert %s: annotation %s names labels %v that its alert does not have", r.Alert, k, missing)
		}
		if strings.Contains(v, "{{") {
			return nil, fmt.Errorf("alert %s: annotation %s uses a template other than {{ $labels.NAME }}, which the test cannot render", r.Alert, k)
		}
		out[k] = v
	}
	return out, nil
}
