package locktest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// RequireHidden prints v every way a program might (fmt's %v, %+v, %s and
// %#v, log/slog's text and JSON handlers, encoding/json) and fails t if
// secret appears in any of them. A backend uses it for its own types that
// carry a lease or an owner value.
func RequireHidden(t testing.TB, secret string, v any) {
	t.Helper()
	if secret == "" {
		t.Fatal("locktest: RequireHidden needs a non-empty secret")
	}
	for form, printed := range Printed(v) {
		if strings.Contains(printed, secret) {
			t.Fatalf("%T printed through %s shows the secret owner value: %s", v, form, printed)
		}
	}
}

// Printed returns v as each printed form RequireHidden checks, by the name
// of the form.
func Printed(v any) map[string]string {
	out := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%s", "%#v"} {
		out["fmt "+verb] = fmt.Sprintf(verb, v)
	}
	var text, js bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("msg", "v", v)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("msg", "v", v)
	out["slog text"] = text.String()
	out["slog JSON"] = js.String()
	if b, err := json.Marshal(v); err != nil {
		out["encoding/json"] = "error: " + err.Error()
	} else {
		out["encoding/json"] = string(b)
	}
	return out
}
