// Command apidocs writes the API reference, docs/api-reference.md, from the
// CRDs that controller-gen generates from the Go types in api/v1alpha1: every
// field of every kind with its type, constraints, validation rules and the
// documentation written on the Go field. `make api-docs` runs it; a test
// fails when the committed page is stale.
//
//	go run ./api/apidocs -crds charts/rollgate/crds -out docs/api-reference.md
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	crds := flag.String("crds", "charts/rollgate/crds", "folder of the generated CRD YAML files")
	out := flag.String("out", "docs/api-reference.md", "file to write")
	flag.Parse()
	page, err := RenderDir(*crds)
	if err == nil {
		err = os.WriteFile(*out, []byte(page), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
}
