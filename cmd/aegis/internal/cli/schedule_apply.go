package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/aegislab/aegis/schedule"
)

// maxScheduleFile bounds apply's file: a catalog is not megabytes.
const maxScheduleFile = 4 << 20

// fileKeys are the keys of a schedule in apply's file: put's flags, and
// name.
var fileKeys = []string{"name", "cron", "every", "tz", "handler", "args", "misfire", "catch-up", "overlap", "deadline",
	"max-attempts", "lock-at-most-for", "lock-at-least-for", "no-keep-alive"}

// fileSchedule is a schedule as apply's file writes it; durations are
// text (30s, 5m).
type fileSchedule struct {
	Name           string    `yaml:"name"`
	Cron           string    `yaml:"cron"`
	Every          string    `yaml:"every"`
	TZ             string    `yaml:"tz"`
	Handler        string    `yaml:"handler"`
	Args           yaml.Node `yaml:"args"`
	Misfire        string    `yaml:"misfire"`
	CatchUp        int       `yaml:"catch-up"`
	Overlap        string    `yaml:"overlap"`
	Deadline       string    `yaml:"deadline"`
	MaxAttempts    int       `yaml:"max-attempts"`
	LockAtMostFor  string    `yaml:"lock-at-most-for"`
	LockAtLeastFor string    `yaml:"lock-at-least-for"`
	NoKeepAlive    bool      `yaml:"no-keep-alive"`
}

// fileFields are the catalog's names of the file's keys.
var fileFields = strings.NewReplacer(
	"Entry.Name", "name",
	"Entry.Cron", "cron",
	"Entry.TZ", "tz",
	"Entry.Every", "every",
	"Entry.Handler", "handler",
	"Entry.Args", "args",
	"Entry.Misfire", "misfire",
	"Entry.CatchUpMax", "catch-up",
	"Entry.Overlap", "overlap",
	"Entry.StartingDeadline", "deadline",
	"Entry.MaxAttempts", "max-attempts",
	"Entry.LockAtMostFor", "lock-at-most-for",
	"Entry.LockAtLeastFor", "lock-at-least-for",
	"aegis: invalid argument: ", "",
)

// changeFields are the file's names of schedule.Changes' fields.
var changeFields = map[string]string{
	"Spec": "spec", "Handler": "handler", "Args": "args", "Misfire": "misfire", "CatchUpMax": "catch-up",
	"Overlap": "overlap", "StartingDeadline": "deadline", "MaxAttempts": "max-attempts",
	"LockAtMostFor": "lock-at-most-for", "LockAtLeastFor": "lock-at-least-for", "DisableKeepAlive": "no-keep-alive",
}

// readScheduleFile reads and parses apply's file.
func readScheduleFile(path string) ([]schedule.Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("-f: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxScheduleFile+1))
	if err != nil {
		return nil, usagef("-f: %v", err)
	}
	if len(data) > maxScheduleFile {
		return nil, usagef("-f %s: larger than %d bytes", path, maxScheduleFile)
	}
	es, err := parseScheduleFile(data)
	if err != nil {
		return nil, usagef("%s: %v", path, err)
	}
	return es, nil
}

// parseScheduleFile parses apply's file, YAML (or JSON, which is YAML):
// a mapping whose only key is schedules, a sequence of schedules with
// put's flags as keys. Every schedule is checked as the catalog checks it;
// an error names the schedule (or its position and line) and the key.
func parseScheduleFile(data []byte) ([]schedule.Entry, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, errors.New("the file is empty: want schedules: followed by a list of schedules")
	} else if err != nil {
		return nil, fmt.Errorf("not YAML: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document: want one")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping with the key schedules", root.Line)
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Value != "schedules" {
			return nil, fmt.Errorf("line %d: unknown key %.40q: want schedules", k.Line, k.Value)
		}
		list = root.Content[i+1]
	}
	switch {
	case list == nil:
		return nil, fmt.Errorf("line %d: no key schedules", root.Line)
	case list.Kind != yaml.SequenceNode:
		return nil, fmt.Errorf("line %d: schedules: want a list of schedules", list.Line)
	case len(list.Content) == 0:
		// With --prune, an empty list would delete the namespace's
		// schedules: `aegis schedule rm` does that one by one.
		return nil, fmt.Errorf("line %d: schedules is empty", list.Line)
	}
	out := make([]schedule.Entry, 0, len(list.Content))
	lines := map[string]int{}
	for i, n := range list.Content {
		e, err := parseFileSchedule(n)
		if err != nil {
			return nil, fmt.Errorf("schedules[%d] (line %d)%s: %w", i, n.Line, nameOf(e.Name), err)
		}
		if line, dup := lines[e.Name]; dup {
			return nil, fmt.Errorf("schedules[%d] (line %d): name %q is also the schedule at line %d", i, n.Line, e.Name, line)
		}
		lines[e.Name] = n.Line
		out = append(out, e)
	}
	return out, nil
}

// nameOf is ` "NAME"` when the schedule's name was read.
func nameOf(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" %.70q", name)
}

// parseFileSchedule parses a schedule of the file. The entry returned
// with an error has the name, when it was read.
func parseFileSchedule(n *yaml.Node) (schedule.Entry, error) {
	if n.Kind != yaml.MappingNode {
		return schedule.Entry{}, errors.New("want a mapping of a schedule's keys (name, handler, cron or every, ...)")
	}
	var named schedule.Entry // the name, for the errors below
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := n.Content[i+1]; n.Content[i].Value == "name" && v.Kind == yaml.ScalarNode {
			named.Name = v.Value
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if !slices.Contains(fileKeys, k) {
			return named, fmt.Errorf("unknown key %.40q (line %d): want one of %s", k, n.Content[i].Line, strings.Join(fileKeys, ", "))
		}
		if seen[k] {
			return named, fmt.Errorf("key %s twice (line %d)", k, n.Content[i].Line)
		}
		seen[k] = true
	}
	var fs fileSchedule
	if err := n.Decode(&fs); err != nil {
		return named, fmt.Errorf("%v", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	e := schedule.Entry{Name: fs.Name, Cron: fs.Cron, TZ: fs.TZ, Handler: fs.Handler, Misfire: schedule.MisfireFireOnce,
		CatchUpMax: fs.CatchUp, MaxAttempts: fs.MaxAttempts, DisableKeepAlive: fs.NoKeepAlive}
	switch {
	case fs.Name == "":
		return e, errors.New("name is required")
	case seen["cron"] && strings.TrimSpace(fs.Cron) == "":
		return e, errors.New("cron is empty: want a cron spec with seconds, such as \"0 30 2 * * *\"")
	case fs.Handler == "":
		return e, errors.New("handler is required: the name the replicas registered with Scheduler.Handle")
	}
	for _, d := range []struct {
		key, text string
		to        *time.Duration
	}{{"every", fs.Every, &e.Every}, {"deadline", fs.Deadline, &e.StartingDeadline},
		{"lock-at-most-for", fs.LockAtMostFor, &e.LockAtMostFor}, {"lock-at-least-for", fs.LockAtLeastFor, &e.LockAtLeastFor}} {
		if !seen[d.key] {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil {
			return e, fmt.Errorf("%s %.40q: want a duration, such as 30s or 5m", d.key, d.text)
		}
		*d.to = v
	}
	if seen["every"] && e.Every <= 0 {
		return e, fmt.Errorf("every %s: must be positive", e.Every)
	}
	var err error
	if seen["misfire"] {
		if e.Misfire, err = schedule.ParseMisfire(fs.Misfire); err != nil {
			return e, fmt.Errorf("misfire %.40q: want fire-once, skip or catch-up", fs.Misfire)
		}
	}
	e.Overlap = schedule.OverlapForbid
	if seen["overlap"] {
		if e.Overlap, err = schedule.ParseOverlap(fs.Overlap); err != nil {
			return e, fmt.Errorf("overlap %.40q: want forbid, replace or allow", fs.Overlap)
		}
	}
	if seen["args"] {
		var b bytes.Buffer
		if err := nodeJSON(&b, &fs.Args, 0); err != nil {
			return e, fmt.Errorf("args (line %d): %w", fs.Args.Line, err)
		}
		e.Args = b.Bytes()
	}
	if err := e.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("schedule: %q: ", e.Name))
		return e, errors.New(fileFields.Replace(strings.TrimPrefix(msg, "schedule: ")))
	}
	return e, nil
}

// nodeJSON writes YAML node n as JSON, keeping a mapping's key order (the
// handler receives the bytes).
func nodeJSON(b *bytes.Buffer, n *yaml.Node, depth int) error {
	if depth > 64 {
		return errors.New("nested more than 64 deep")
	}
	switch n.Kind {
	case yaml.AliasNode:
		return errors.New("aliases (*name) are not supported")
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!null" || k.Tag == "!!merge" {
				return fmt.Errorf("line %d: a key must be a string", k.Line)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			kb, err := json.Marshal(k.Value)
			if err != nil {
				return err
			}
			b.Write(kb)
			b.WriteByte(':')
			if err := nodeJSON(b, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := nodeJSON(b, c, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %v", n.Line, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
		}
		if _, ok := v.(time.Time); ok {
			v = n.Value // a timestamp stays the text it was
		}
		vb, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %v", n.Line, err)
		}
		b.Write(vb)
	default:
		return fmt.Errorf("line %d: not a JSON value", n.Line)
	}
	return nil
}

// scheduleApply makes the namespace's catalog match es: it creates and
// updates (Put) the schedules of the file, and with prune deletes the
// others; dryRun prints the same lines and writes nothing. A schedule's
// pause is left as it is.
func scheduleApply(ctx context.Context, cat *schedule.Catalog, es []schedule.Entry, dryRun, prune bool, stdout io.Writer) error {
	cur, err := cat.List(ctx)
	if err != nil {
		// An unreadable row cannot be compared: list names it.
		return fmt.Errorf("read the catalog: %w (aegis schedule list names the rows)", err)
	}
	stored := map[string]schedule.Entry{}
	for _, e := range cur {
		stored[e.Name] = e
	}
	would := ""
	if dryRun {
		would = "would be "
	}
	for _, e := range es {
		old, ok := stored[e.Name]
		delete(stored, e.Name)
		if !ok {
			if !dryRun {
				if _, err := cat.Put(ctx, e); err != nil {
					return catalogError(err, e.Name, cat.Namespace())
				}
			}
			fmt.Fprintf(stdout, "%s: %screated: %s, handler %s\n", shown(e.Name), would, shown(e.Spec()), shown(e.Handler))
			continue
		}
		changes, err := schedule.Changes(old, e)
		if err != nil {
			return catalogError(err, e.Name, cat.Namespace())
		}
		if len(changes) == 0 {
			fmt.Fprintf(stdout, "%s: unchanged (version %d)\n", shown(e.Name), old.Version)
			continue
		}
		if !dryRun {
			if _, err := cat.Put(ctx, e); err != nil {
				return catalogError(err, e.Name, cat.Namespace())
			}
		}
		for i, c := range changes {
			if field, rest, ok := strings.Cut(c, ": "); ok && changeFields[field] != "" {
				changes[i] = changeFields[field] + " " + rest
			}
		}
		fmt.Fprintf(stdout, "%s: %supdated: %s\n", shown(e.Name), would, shown(strings.Join(changes, "; ")))
	}
	left := make([]string, 0, len(stored))
	for name := range stored {
		left = append(left, name)
	}
	slices.Sort(left)
	for _, name := range left {
		if !prune {
			fmt.Fprintf(stdout, "%s: not in the file, kept (--prune deletes it)\n", shown(name))
			continue
		}
		if !dryRun {
			if err := cat.Delete(ctx, name); err != nil && !errors.Is(err, schedule.ErrNotFound) {
				return catalogError(err, name, cat.Namespace())
			}
		}
		fmt.Fprintf(stdout, "%s: %sdeleted\n", shown(name), would)
	}
	if dryRun {
		fmt.Fprintln(stdout, "dry run: nothing was changed")
	}
	return nil
}
