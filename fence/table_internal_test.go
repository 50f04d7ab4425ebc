package fence

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every statement of the package, renamed for another table, names none
// of the default tables (a statement added with a name the renaming does
// not know fails here), and the default table's statements are the text
// they always were.
func TestEveryStatementRenamed(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var literals []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "table.go" {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && objectName.MatchString(lit.Value) {
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				literals = append(literals, s)
			}
			return true
		})
	}
	require.Greater(t, len(literals), 10, "the statements were found")
	for _, table := range []string{"fence", "billing.fence"} {
		tb, err := newTables(table)
		require.NoError(t, err)
		for _, s := range literals {
			r := tb.sql(s)
			require.Empty(t, objectName.FindAllString(r, -1), "%s: left in %s", table, r)
		}
		require.Equal(t, "fence:"+table, tb.component())
	}
	for _, s := range literals {
		require.Equal(t, s, std.t.sql(s))
	}
	require.Equal(t, "fence", std.t.component())
}

// The zero Fence is the default tables'.
func TestZeroFence(t *testing.T) {
	t.Parallel()
	var f Fence
	require.Equal(t, DefaultTable, f.Table())
	require.Equal(t, "fence", f.t.component())
	require.Equal(t, checkSQL, f.t.sql(checkSQL))
}
