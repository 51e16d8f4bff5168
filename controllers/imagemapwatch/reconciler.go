package imagemapwatch

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/virtpod/virtpod/pkg/image/imagemap"
)

// Reporter tells the ConfigMap's author about lines that were ignored, once per version.
type Reporter struct {
	Source   *Source
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch

// Reconcile reports the map's problems as Warning events on the ConfigMap and in the log.
func (r *Reporter) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	m, problems, err := r.Source.Map(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	cm := &corev1.ConfigMap{}
	if err := r.Source.Reader.Get(ctx, r.Source.Key, cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	logger := log.FromContext(ctx)
	for _, p := range problems {
		logger.Info("image map line ignored", "line", p.Line, "text", p.Text, "reason", p.Reason)
	}
	if len(problems) > 0 {
		// One event per version of the ConfigMap: the event API folds events that differ only
		// in their note into one series, so an event per line would lose all but the first.
		r.Recorder.Eventf(cm, nil, corev1.EventTypeWarning, "ImageMapLinesIgnored", "ParseImageMap", "%s", summary(problems))
	}
	logger.Info("image map loaded", "mappings", m.Len(), "ignored", len(problems), "resourceVersion", cm.ResourceVersion)
	return reconcile.Result{}, nil
}

// SetupWithManager watches only the named ConfigMap.
func (r *Reporter) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("imagemap").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.Source.Key.Namespace && o.GetName() == r.Source.Key.Name
		}))).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
}

// summary lists the ignored lines in at most an event note's 1 KiB.
func summary(problems []imagemap.Problem) string {
	const limit = 1000
	s := fmt.Sprintf("%d line(s) of key %q ignored, the others apply; fix or remove them:", len(problems), imagemap.Key)
	for i, p := range problems {
		item := fmt.Sprintf(" line %d: %s;", p.Line, p.Reason)
		if len(s)+len(item) > limit {
			return s + fmt.Sprintf(" and %d more (see the controller's log)", len(problems)-i)
		}
		s += item
	}
	return s
}
