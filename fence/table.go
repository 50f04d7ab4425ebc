package fence

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/migrate"
)

// DefaultTable is the fence table of a Config without Table, the table of
// the package's functions.
const DefaultTable = "aegis_fence"

// maxTableLen bounds the table's own name (without its schema): the
// longest name derived from it, the index <table>_refusal_log_resource,
// appends 21 bytes, and identifiers are at most 63.
const maxTableLen = 42

// Config configures a Fence. A nil Config, or a zero field, means the
// default the field's comment gives.
type Config struct {
	// Table is the fence table, optionally schema-qualified
	// ("billing.fence"); the refusal tables are named from it:
	// <Table>_refusal (the counts) and <Table>_refusal_log (the log, with
	// its indexes <Table>_refusal_log_at and _resource). Letters, digits
	// and _, at most 42 bytes without the schema. Default DefaultTable
	// ("aegis_fence"), whose tables keep the names they always had.
	Table string
}

// Fence is the fence on the tables of a Config: its methods are the
// package's functions of the same names, on those tables instead of the
// default ones. Two services on one database and one schema fence their
// resources apart with a Fence each, on tables of their own. The package's
// functions are the Fence of the default tables. A Fence is safe for
// concurrent use; its zero value is the default tables' Fence.
type Fence struct {
	t tables
}

// std is the Fence of the package's functions.
var std = &Fence{t: tables{name: DefaultTable}}

// New returns the Fence of cfg's tables. It does no I/O: run its Migrate
// (or MigrateSQL) before its first check. A nil cfg means defaults. A bad
// Table is an error wrapping aegis.ErrInvalid that names it.
func New(cfg *Config) (*Fence, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	t, err := newTables(cmp.Or(c.Table, DefaultTable))
	if err != nil {
		return nil, err
	}
	return &Fence{t: t}, nil
}

// Table is the fence table's name, as configured.
func (f *Fence) Table() string { return cmp.Or(f.t.name, DefaultTable) }

// tables are the names of the fence's tables, derived from Config.Table.
// The package's statements are written with the default names; sql
// rewrites them for another table, and returns them unchanged, byte for
// byte, for the default.
type tables struct {
	name   string            // Config.Table, as given
	names  map[string]string // a default name to its quoted name here; nil for the default table
	rename migrate.Renamer
}

// objectName matches the default names of the fence's objects.
var objectName = regexp.MustCompile(`\baegis_fence\w*`)

func newTables(table string) (tables, error) {
	if _, err := migrate.Table("fence: Config.Table", table); err != nil {
		return tables{}, err
	}
	schema, base, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, base = "", table
	}
	if len(base) > maxTableLen {
		return tables{}, fmt.Errorf("fence: Config.Table: %w: %q is longer than %d bytes (the names of its refusal log's indexes append up to 21)", aegis.ErrInvalid, table, maxTableLen)
	}
	t := tables{name: table}
	if table == DefaultTable {
		return t, nil
	}
	quote := func(n string) string { return `"` + n + `"` }
	qual := quote
	if qualified {
		qual = func(n string) string { return quote(schema) + "." + quote(n) }
	}
	t.names = map[string]string{
		"aegis_fence":                      qual(base),
		"aegis_fence_refusal":              qual(base + "_refusal"),
		"aegis_fence_refusal_log":          qual(base + "_refusal_log"),
		"aegis_fence_refusal_log_at":       quote(base + "_refusal_log_at"), // an index is named without its schema: its table's
		"aegis_fence_refusal_log_resource": quote(base + "_refusal_log_resource"),
	}
	t.rename = migrate.NewRenamer(objectName, t.names, nil)
	return t, nil
}

// sql returns statement s (written with the default names) for these
// tables.
func (t tables) sql(s string) string { return t.rename.Rename(s) }

// table is the name here of the default table n (aegis_fence,
// aegis_fence_refusal, aegis_fence_refusal_log), unquoted, as errors and
// migrate.Exists take it.
func (t tables) table(n string) string {
	if t.names == nil {
		return n
	}
	return strings.ReplaceAll(t.names[n], `"`, "")
}

// component is the key of the fence's migrations in aegis_migrations:
// "fence" for the default table, as it always was, else "fence:<table>".
func (t tables) component() string {
	if t.names == nil {
		return "fence"
	}
	return "fence:" + t.name
}

// migrateHint names the call that creates or upgrades these tables, for
// the errors that say to run it.
func (t tables) migrateHint() string {
	if t.names == nil {
		return "run fence.Migrate (pgx) or fence.MigrateSQL (database/sql)"
	}
	return fmt.Sprintf("run Migrate (pgx) or MigrateSQL (database/sql) of the Fence of table %q", t.name)
}
