package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// manifest is one object read from a file or rendered.
type manifest struct {
	// source is where it was read: file:line for a file (addFile), the
	// folder and template for a rendered chart or kustomization
	// (addRendered), source:document (1-based) for add.
	source string
	obj    *unstructured.Unstructured
}

// manifestSet is every object read, in order, and the plain files among
// their sources (not stdin, nor a rendered folder): --base reads those
// files again at the base commit.
type manifestSet struct {
	objects []manifest
	files   []string
}

// add splits data into YAML documents and keeps every Kubernetes object
// (List items included); objects without a namespace get namespace.
func (s *manifestSet) add(source string, data []byte, namespace string) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return fmt.Errorf("%s document %d: %w", source, doc, err)
		}
		var m map[string]any
		if err := utiljson.Unmarshal(js, &m); err != nil || m == nil {
			continue // not an object (a comment-only document, a scalar)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			continue
		}
		items := []*unstructured.Unstructured{u}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return fmt.Errorf("%s document %d: %w", source, doc, err)
			}
			items = items[:0]
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		}
		for _, o := range items {
			if o.GetNamespace() == "" {
				o.SetNamespace(namespace)
			}
			s.objects = append(s.objects, manifest{source: fmt.Sprintf("%s:%d", source, doc), obj: o})
		}
	}
}

// find returns the object of that kind, namespace and name, or nil.
func (s *manifestSet) find(apiVersion, kind, namespace, name string) *manifest {
	for i := range s.objects {
		o := s.objects[i].obj
		if o.GetAPIVersion() == apiVersion && o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return &s.objects[i]
		}
	}
	return nil
}
