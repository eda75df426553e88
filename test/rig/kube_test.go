package rig

import (
	"strings"
	"testing"
)

func TestDecodeSkipsEmptyDocuments(t *testing.T) {
	objs := Decode(t, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"b\"}}\n")
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if strings.Join(got, ",") != "ConfigMap/a,Secret/b" {
		t.Fatalf("decoded %v, want ConfigMap/a and Secret/b", got)
	}
	if failed := Failure(func(tb testing.TB) { Decode(tb, "kind: [") }); !strings.Contains(failed, "decode") {
		t.Fatalf("bad YAML: failure %q, want a decode error", failed)
	}
}
