// Package promreg registers Prometheus collectors as every package of the
// library does: a collector another client registered already on the same
// registry (same name, labels and type) is shared, not an error.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c, or replaces *c with the collector of the same
// description registered already. Any other error is returned as it is.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}
