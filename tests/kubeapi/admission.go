package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// AdmissionObjects are the admission policies and bindings config/admission ships, in file and
// document order.
func AdmissionObjects() ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(Root(), "config", "admission", "*-policy.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var objs []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
	}
	if len(objs) == 0 {
		return nil, errors.New("config/admission holds no policies")
	}
	return objs, nil
}

// InstallAdmission creates config/admission's policies and bindings as shipped, and returns a
// function that deletes them again.
func (e *Env) InstallAdmission(ctx context.Context) (func(), error) {
	objs, err := AdmissionObjects()
	if err != nil {
		return nil, err
	}
	remove := func() {
		for _, o := range objs {
			_ = e.Client.Delete(ctx, o)
		}
	}
	for _, o := range objs {
		if err := e.Client.Create(ctx, o); err != nil {
			remove()
			return nil, fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return remove, nil
}
