package elect

import "github.com/aegislab/aegis/internal/badinput"

// invalid is a caller's mistake (a nil argument, a bad Config field): see
// [badinput.Errorf].
func invalid(format string, args ...any) error { return badinput.Errorf(format, args...) }
