// Package parallel sets how many stories of a test package run side by
// side when the command line does not say.
package parallel

import (
	"flag"
	"strconv"
)

// Default sets -test.parallel to n unless the command line gave it. Call it
// from TestMain, after flag.Parse and before m.Run. go test's own default is
// GOMAXPROCS (two on the machines the suite runs on), which suits stories
// that compute, not stories that spend most of their time waiting on
// clusters, intervals and pauses.
func Default(n int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		// test.parallel exists in every test binary once flag.Parse ran.
		panic(err)
	}
}
