package migrate

import (
	"regexp"
	"strings"
	"sync"
)

// Renamer rewrites statements written with a component's default object
// names (aegis_job, aegis_fence, ...) for objects of other names, as a
// component with a configurable table needs: every match of Pattern that
// is a key of Names becomes its value, after Before's replacements. Each
// statement is rewritten once; the rewrite is cached. The zero Renamer
// (nil Names: the default names) returns every statement unchanged.
type Renamer struct {
	pattern *regexp.Regexp
	names   map[string]string
	before  *strings.Replacer
	done    *sync.Map // statement to its rewrite
}

// NewRenamer returns the Renamer of names (a default name to its name
// here, quoted as the statement needs it) matched by pattern; before, if
// not nil, is applied first.
func NewRenamer(pattern *regexp.Regexp, names map[string]string, before *strings.Replacer) Renamer {
	return Renamer{pattern: pattern, names: names, before: before, done: &sync.Map{}}
}

// Rename returns s for the renamed objects.
func (r Renamer) Rename(s string) string {
	if r.names == nil {
		return s
	}
	if out, ok := r.done.Load(s); ok {
		return out.(string)
	}
	out := s
	if r.before != nil {
		out = r.before.Replace(out)
	}
	out = r.pattern.ReplaceAllStringFunc(out, func(n string) string {
		if to, ok := r.names[n]; ok {
			return to
		}
		return n
	})
	r.done.Store(s, out)
	return out
}
