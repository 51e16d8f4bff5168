package v1alpha1

// Reasons of the evacuation's events, on the runner pod a drain evicts (kubectl drain users see
// pod events) and on the VM.
const (
	// EventEvacuating: the node is cordoned; the pod's evictions wait while <vm>-evacuation
	// moves the guest.
	EventEvacuating = "Evacuating"
	// EventEvacuationFailed: the evacuation failed (its cause); the evictions still wait, and it
	// is tried again at the time the event names (back-off 10 s doubling to 5 min).
	EventEvacuationFailed = "EvacuationFailed"
	// EventBudgetWithheld: evictionStrategy is LiveMigrate but the guest cannot migrate (its
	// Migratable condition): no PodDisruptionBudget holds evictions, so a drain stops the guest
	// and it restarts elsewhere per runStrategy.
	EventBudgetWithheld = "BudgetWithheld"
)
