package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aegislab/aegis/internal/promreg"
)

func TestRegisterSharesTheRegisteredCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "aegis_test_total", Help: "A test counter."}
	first := prometheus.NewCounterVec(opts, []string{"queue"})
	if err := promreg.Register(reg, &first); err != nil {
		t.Fatal(err)
	}
	second := prometheus.NewCounterVec(opts, []string{"queue"})
	if err := promreg.Register(reg, &second); err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatal("the second client did not get the registered collector")
	}
	// The same name with other labels is a conflict, not shared.
	other := prometheus.NewCounterVec(opts, []string{"kind"})
	if err := promreg.Register(reg, &other); err == nil {
		t.Fatal("a collector of the same name and other labels registered")
	}
}
