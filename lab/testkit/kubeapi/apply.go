//go:build kubeapiserver

package kubeapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Apply server-side-applies every document of a multi-document YAML stream,
// as `kubectl apply --server-side --field-manager=manager` does (a PATCH of
// type application/apply-patch+yaml per object). A document without a
// namespace and of a namespaced kind goes into defaultNamespace. It returns
// the first refusal, naming the object; the server's validation (schemas,
// CRD structural schemas, RBAC escalation checks) is the judge.
func (s *Server) Apply(t testing.TB, docs []byte, defaultNamespace, manager string) error {
	t.Helper()
	ctx := context.Background()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(docs)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading YAML: %w", err)
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return fmt.Errorf("decoding YAML document: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := s.applyOne(ctx, &obj, defaultNamespace, manager); err != nil {
			return err
		}
	}
}

func (s *Server) applyOne(ctx context.Context, obj *unstructured.Unstructured, defaultNamespace, manager string) error {
	gvk := obj.GroupVersionKind()
	name := fmt.Sprintf("%s %s", gvk.Kind, obj.GetName())
	var mapping *meta.RESTMapping
	// A CRD applied a moment ago is served once it is Established; the
	// mapper learns it only after a discovery refresh.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		mapping, err = s.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no resource for %s: %w", name, gvk, err)
		}
		s.Mapper.Reset()
		time.Sleep(200 * time.Millisecond)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: manager, Force: &force}
	res := s.Dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = defaultNamespace
		}
		_, err = res.Namespace(ns).Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	} else {
		_, err = res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	}
	if err != nil {
		return fmt.Errorf("server-side apply of %s: %w", name, err)
	}
	if gvk.Kind == "CustomResourceDefinition" {
		s.Mapper.Reset()
	}
	return nil
}
