package queue

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/aegislab/aegis/internal/migrate"
)

// DefaultTable is the job table of a Config without Table.
const DefaultTable = "aegis_job"

// maxTableLen bounds the table's own name (without its schema): the
// longest name derived from it, the index <table>_finished_at, appends 12
// bytes, and PostgreSQL's identifiers are at most 63.
const maxTableLen = 50

// tables are the names of the queue's objects, derived from Config.Table.
// The package's statements are written with the default names (sql.go,
// inspectsql.go); sql rewrites them for another table. With the default
// table it returns them unchanged, byte for byte, so a database migrated
// by an earlier version keeps working.
type tables struct {
	name    string         // Config.Table, as given
	ident   pgx.Identifier // the job table, for COPY
	names   map[string]string
	channel string // the channel's SQL expression (channelSQL for the default)
	rename  migrate.Renamer
}

// objectName matches the default names of the queue's objects in a
// statement; the channel's prefix 'aegis_queue_' is matched too and kept.
var objectName = regexp.MustCompile(`\baegis_(job|queue)\w*`)

// newTables checks table (optionally schema-qualified) and derives the
// names of the queue's objects from it: <table>_finished (the finished
// jobs), <table>_queue (the paused queues), the function <table>_next,
// the indexes <table>_fetch, _running, _scheduled, _unique, _finished_at,
// _dead, in the table's schema. The job table aegis_job keeps the paused
// queues' table aegis_queue it always had. field names the config field
// in an error.
func newTables(field, table string) (tables, error) {
	table = cmp.Or(table, DefaultTable)
	if _, err := migrate.Table(field, table); err != nil {
		return tables{}, invalid("%w", err)
	}
	schema, base, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, base = "", table
	}
	if len(base) > maxTableLen {
		return tables{}, invalid("%s %q: the table's name is longer than %d bytes (the names of its indexes append up to 12)", field, table, maxTableLen)
	}
	t := tables{name: table, ident: pgx.Identifier{base}, channel: channelSQL}
	if table == DefaultTable {
		return t, nil
	}
	quote := func(n string) string { return `"` + n + `"` }
	qual := quote
	if qualified {
		t.ident = pgx.Identifier{schema, base}
		qual = func(n string) string { return quote(schema) + "." + quote(n) }
	}
	paused := base + "_queue"
	if base == DefaultTable {
		paused = "aegis_queue"
	}
	t.names = map[string]string{
		"aegis_job":             qual(base),
		"aegis_job_finished":    qual(base + "_finished"),
		"aegis_queue":           qual(paused),
		"aegis_job_next":        qual(base + "_next"),
		"aegis_job_fetch":       quote(base + "_fetch"), // an index is named without its schema: its table's
		"aegis_job_running":     quote(base + "_running"),
		"aegis_job_scheduled":   quote(base + "_scheduled"),
		"aegis_job_unique":      quote(base + "_unique"),
		"aegis_job_finished_at": quote(base + "_finished_at"),
		"aegis_job_dead":        quote(base + "_dead"),
	}
	// Channels are per database. The default's is per schema (the
	// schema's name hashed); another table's is per schema and table, the
	// same whether the table is named with its schema or found on the
	// search_path, so every client of one table shares it.
	key := "current_schema() || '." + base + "'"
	switch {
	case qualified && base == DefaultTable:
		key = "'" + schema + "'"
	case qualified:
		key = "'" + schema + "." + base + "'"
	case base == DefaultTable:
		key = "current_schema()"
	}
	t.channel = `'aegis_queue_' || left(md5(` + key + `), 16)`
	t.rename = migrate.NewRenamer(objectName, t.names, strings.NewReplacer(channelSQL, t.channel))
	return t, nil
}

// sql returns statement s (written with the default names) for these
// tables.
func (t tables) sql(s string) string { return t.rename.Rename(s) }

// component is the key of the queue's migrations in aegis_migrations:
// "queue" for the default table, as it always was, else "queue:<table>".
func (t tables) component() string {
	if t.name == DefaultTable {
		return "queue"
	}
	return "queue:" + t.name
}

// migrations are the package's migrations for these tables.
func (t tables) migrations() []migrate.Migration {
	out := slices.Clone(migrations)
	for i := range out {
		out[i].SQL = t.sql(out[i].SQL)
	}
	return out
}

// list names the job table, the finished jobs' and the paused queues', as
// migrate.Exists takes them (schema-qualified when the table is).
func (t tables) list() []string {
	if t.names == nil {
		return []string{"aegis_job", "aegis_job_finished", "aegis_queue"}
	}
	out := make([]string, 0, 3)
	for _, n := range []string{"aegis_job", "aegis_job_finished", "aegis_queue"} {
		out = append(out, strings.ReplaceAll(t.names[n], `"`, ""))
	}
	return out
}
