package schedule

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics a scheduler exports when Config.Registerer is set, per
// namespace and node (several schedulers may share one registry):
//
//	aegis_schedule_bound{namespace,node}             catalog schedules this replica runs
//	aegis_schedule_unhandled{namespace,node}         enabled catalog schedules whose handler this replica lacks
//	aegis_schedule_not_primary_total{namespace,node} claims refused because the store is a hot standby
//	aegis_schedule_runs_total{namespace,node}        runs started on this replica
type metrics struct {
	bound, unhandled prometheus.Gauge
	notPrimary, runs prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, ns, node string) (*metrics, error) {
	labels := prometheus.Labels{"namespace": ns, "node": node}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "aegis", Subsystem: "schedule", Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "aegis", Subsystem: "schedule", Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		bound:      gauge("bound", "Catalog schedules this replica runs."),
		unhandled:  gauge("unhandled", "Enabled catalog schedules whose handler this replica does not have."),
		notPrimary: counter("not_primary_total", "Claims refused because this replica's store is a hot standby (not the primary)."),
		runs:       counter("runs_total", "Runs started on this replica."),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.bound, m.unhandled, m.notPrimary, m.runs} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, invalid("schedule: Config.Registerer: a scheduler of namespace %q and node %q is registered already", ns, node)
			}
			return nil, fmt.Errorf("schedule: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) setUnhandled(n int) { m.unhandled.Set(float64(n)) }

// observe counts an event in the per-schedule metrics.
func (m *metrics) observe(Event) {}
