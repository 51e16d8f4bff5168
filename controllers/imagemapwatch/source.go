// Package imagemapwatch serves the controller-level image map: it reads the ConfigMap the
// --image-map flag names, parses it once per version (pkg/image/imagemap), and reports its bad lines
// as Warning events on the ConfigMap. A missing ConfigMap maps nothing.
package imagemapwatch

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/pkg/image/imagemap"
)

// Source is the image map as the ConfigMap holds it now. A nil Source maps nothing.
type Source struct {
	Reader client.Reader // the manager's cache, which holds only this ConfigMap
	Key    types.NamespacedName

	mu       sync.Mutex
	version  string
	m        imagemap.Map
	problems []imagemap.Problem
}

// Map returns the current map and the lines it ignored.
func (s *Source) Map(ctx context.Context) (imagemap.Map, []imagemap.Problem, error) {
	if s == nil {
		return imagemap.Map{}, nil, nil
	}
	cm := &corev1.ConfigMap{}
	err := s.Reader.Get(ctx, s.Key, cm)
	if apierrors.IsNotFound(err) {
		return imagemap.Map{}, nil, nil
	}
	if err != nil {
		return imagemap.Map{}, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cm.ResourceVersion != s.version {
		s.m, s.problems = imagemap.Parse(cm.Data[imagemap.Key])
		s.version = cm.ResourceVersion
	}
	return s.m, s.problems, nil
}
