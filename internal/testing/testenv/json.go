package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
)

// SameJSON reports whether a and b are JSON texts of the same value,
// compared as a store hands JSON back rather than byte for byte:
// PostgreSQL's jsonb drops white space and all but the last of duplicate
// keys, and writes numbers its own way (1e3 as 1000). Numbers compare by
// value, strings by their decoded text. The error says which text is not
// one JSON value.
func SameJSON(a, b []byte) (bool, error) {
	x, err := decodeJSON(a)
	if err != nil {
		return false, fmt.Errorf("%.80q: %w", a, err)
	}
	y, err := decodeJSON(b)
	if err != nil {
		return false, fmt.Errorf("%.80q: %w", b, err)
	}
	return sameJSON(x, y), nil
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

func sameJSON(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		// Precise enough for any number PostgreSQL's numeric holds.
		x, _, errA := big.ParseFloat(string(a), 10, 1<<16, big.ToNearestEven)
		y, _, errB := big.ParseFloat(string(b), 10, 1<<16, big.ToNearestEven)
		return errA == nil && errB == nil && x.Cmp(y) == 0
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	}
	return a == b // a string, a bool or nil
}
