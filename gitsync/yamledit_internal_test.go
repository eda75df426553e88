package gitsync

import (
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

func TestYAMLStringReadsBackAsString(t *testing.T) {
	cases := map[string]string{
		"7b1e2a9f":                 "7b1e2a9f",
		"12345678":                 `"12345678"`,
		"1e10":                     `"1e10"`,
		"y":                        `"y"`,
		"No":                       `"No"`,
		"on":                       `"on"`,
		"null":                     `"null"`,
		"1:20":                     "1:20",
		"ghcr.io/acme/app:1.4.2":   "ghcr.io/acme/app:1.4.2",
		"app@sha256:abc":           "app@sha256:abc",
		"1.4.2":                    "1.4.2",
		"2026-03-01":               `"2026-03-01"`,
		"has space":                `"has space"`,
		"":                         `""`,
		"-dash":                    "-dash",
		"a: b":                     `"a: b"`,
		`quote"inside`:             `"quote\"inside"`,
		"v1.30.1":                  "v1.30.1",
		"0x1F":                     `"0x1F"`,
		"registry:5000/app:latest": "registry:5000/app:latest",
	}
	for in, want := range cases {
		got := yamlString(in)
		if got != want {
			t.Errorf("yamlString(%q) = %s, want %s", in, got, want)
		}
		var v map[string]any
		if err := sigsyaml.Unmarshal([]byte("k: "+got), &v); err != nil || v["k"] != in {
			t.Errorf("%s does not read back as %q under YAML 1.1: %v, %v", got, in, v["k"], err)
		}
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{"a/b.yaml": "a/b.yaml", "/a//b/../c": "a/c", "./x": "x"} {
		if got, err := cleanPath(in); err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/../../x", ".git/config", "a/.git/x"} {
		if _, err := cleanPath(bad); err == nil {
			t.Errorf("cleanPath(%q) accepted", bad)
		}
	}
}
