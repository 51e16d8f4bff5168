// Package config_test renders virtpod's kustomize installs with kustomize's own Go API (the
// version kubectl v1.37 embeds) and checks the controller each one deploys.
package config_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// controller renders the kustomization in dir and returns its controller container.
func controller(t *testing.T, dir string) (args []string, env map[string]string) {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var found []appsv1.Deployment
	for _, r := range rm.Resources() {
		if r.GetKind() != "Deployment" || r.GetName() != "virtpod-controller" {
			continue
		}
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &d); err != nil {
			t.Fatal(err)
		}
		found = append(found, d)
	}
	if len(found) != 1 || len(found[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want one virtpod-controller Deployment with one container, got %d", dir, len(found))
	}
	c := found[0].Spec.Template.Spec.Containers[0]
	env = map[string]string{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s: env %s twice", dir, e.Name)
		}
		env[e.Name] = e.Value
	}
	return c.Args, env
}

// expand does what the kubelet does with a container's args: $(NAME) becomes the value of the
// container's env var NAME.
func expand(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for name, value := range env {
			a = strings.ReplaceAll(a, "$("+name+")", value)
		}
		out[i] = a
	}
	return out
}

// TestControllerFlags: every install runs the controller with each setting exactly once, set by
// name in its overlay, and with the base's other flags untouched.
func TestControllerFlags(t *testing.T) {
	for _, tc := range []struct {
		dir                    string
		runner, imageMap, capi string
	}{
		{"default", "virtpod/runner:latest", "", "false"},
		{"local", "localhost/virtpod/runner:dev", "virtpod-system/virtpod-image-map", "false"},
		{"capi", "virtpod/runner:latest", "", "true"},
		{"local-capi", "localhost/virtpod/runner:dev", "virtpod-system/virtpod-image-map", "true"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			args, env := controller(t, tc.dir)
			got := expand(args, env)
			want := []string{
				"--leader-elect",
				"--leader-election-namespace=virtpod-system",
				"--runner-image=" + tc.runner,
				"--image-map=" + tc.imageMap,
				"--cluster-api=" + tc.capi,
				"--cpu-allocation-ratio=10",
				"--metrics-bind-address=:8080",
				"--health-probe-bind-address=:8081",
			}
			if !slices.Equal(got, want) {
				t.Errorf("controller args (env expanded):\n got %q\nwant %q\n(raw args %q, env %v)", got, want, args, env)
			}
			for _, flag := range []string{"--runner-image=", "--image-map=", "--cluster-api=", "--cpu-allocation-ratio="} {
				n := 0
				for _, a := range got {
					if strings.HasPrefix(a, flag) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%s appears %d times in %q", flag, n, got)
				}
			}
		})
	}
}

// positional is a JSON patch path into a list by index: it breaks silently when the list
// changes, so overlays patch by name instead.
var positional = regexp.MustCompile(`path:\s*\S*/(containers|args|env|initContainers|volumes|volumeMounts|ports)/(\d+|-)`)

// TestNoPatchByPosition: no kustomization under config/ patches a list by position.
func TestNoPatchByPosition(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		n++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range positional.FindAllString(string(b), -1) {
			t.Errorf("%s patches by position: %s", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("found only %d kustomizations under config/", n)
	}
}
