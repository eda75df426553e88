package main

import "testing"

// TestRunRefusesBadFlags: a bad flag, a bad log level or an argument is a
// usage error (exit 2) found before any cluster is looked for; --help is
// not an error.
func TestRunRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, 0},
		{[]string{"--no-such-flag"}, exitUsage},
		{[]string{"--log-level", "loud"}, exitUsage},
		{[]string{"send"}, exitUsage},
	} {
		if got := run(tc.args); got != tc.want {
			t.Errorf("rollgate-notifier %v exited %d, want %d", tc.args, got, tc.want)
		}
	}
}
