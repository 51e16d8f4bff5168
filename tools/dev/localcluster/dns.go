package main

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/virtpod/virtpod/tools/imagebuild/push"
)

// clusterDNSIP is the kube-dns Service's address, which the kubelet gives pods as their
// nameserver (clusterDNS): the tenth address of the Service range, as kubeadm picks it.
const (
	clusterDNSIP  = "10.219.0.10"
	clusterDNSIP6 = "fd00:219::a"
)

// corednsImage is the CoreDNS image's path in the registry (make images: image-coredns).
const corednsImage = "virtpod/coredns"

//go:embed coredns.yaml
var corednsManifest string

// resources maps the manifest's kinds to their API resources.
var resources = map[string]schema.GroupVersionResource{
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"ConfigMap":          {Version: "v1", Resource: "configmaps"},
	"Service":            {Version: "v1", Resource: "services"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Deployment":         {Group: "apps", Version: "v1", Resource: "deployments"},
}

// renderCoreDNS is the CoreDNS manifest with its image by digest.
func renderCoreDNS(image string) ([]*unstructured.Unstructured, error) {
	var b bytes.Buffer
	t := template.Must(template.New("coredns").Parse(corednsManifest))
	if err := t.Execute(&b, struct{ Image, ClusterIP, ClusterIP6 string }{image, clusterDNSIP, clusterDNSIP6}); err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(b.String(), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		if _, ok := resources[u.GetKind()]; !ok {
			return nil, fmt.Errorf("coredns.yaml: kind %s has no resource in dns.go", u.GetKind())
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// startDNS applies CoreDNS (server-side apply, so `up` again is a no-op) and waits until it serves.
func (c *cluster) startDNS(ctx context.Context, kubeconfig string, images push.Lock) error {
	begin := time.Now()
	img, ok := images[corednsImage]
	if !ok {
		return fmt.Errorf("no %s image in %s: run `make images` (it builds coredns.tar)", corednsImage, c.imagesDir)
	}
	objs, err := renderCoreDNS(img.Digest)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, u := range objs {
		body, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(resources[u.GetKind()])
		if ns := u.GetNamespace(); ns != "" {
			ri = dyn.Resource(resources[u.GetKind()]).Namespace(ns)
		}
		force := true
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "localcluster", Force: &force}); err != nil {
			return fmt.Errorf("applying CoreDNS %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err == nil && available(d) {
			fmt.Printf("  %-24s ready in %.1fs (Service kube-system/kube-dns at %s)\n", "coredns", time.Since(begin).Seconds(), clusterDNSIP)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CoreDNS not available after 2 minutes: kubectl -n kube-system describe pods -l k8s-app=kube-dns")
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func available(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
		d.Status.AvailableReplicas == *d.Spec.Replicas
}
