package badinput_test

import (
	"errors"
	"io"
	"testing"

	"github.com/aegislab/aegis"
	"github.com/aegislab/aegis/internal/badinput"
)

func TestErrorf(t *testing.T) {
	err := badinput.Errorf("Config.Lease %s is below %s: %w", "1ms", "10ms", io.EOF)
	if !errors.Is(err, aegis.ErrInvalid) {
		t.Errorf("%v does not match aegis.ErrInvalid", err)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("%v does not match the error it wraps", err)
	}
	if want := "Config.Lease 1ms is below 10ms: EOF"; err.Error() != want {
		t.Errorf("message %q, want %q (the text alone)", err.Error(), want)
	}
	if errors.Is(badinput.Errorf("plain"), io.EOF) {
		t.Error("an error that wraps nothing matches io.EOF")
	}
}
