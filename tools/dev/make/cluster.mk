# The local one-node cluster (tools/dev/localcluster), `make demo`, and the end-to-end tests.
LOCALCLUSTER := go run ./tools/dev/localcluster
KUBECTL      := $(K8S_BIN)/kubectl
CLUSTER_KUBECONFIG := $(VIRTPOD_CACHE)/cluster/kubeconfig/admin.kubeconfig

.PHONY: cluster-binaries cluster-up cluster-down cluster-status demo demo-down test-e2e

cluster-binaries: k8s-binaries containerd runner-deps ## Build every binary the local cluster runs.

cluster-up: cluster-binaries images ## Start the local cluster and import virtpod's images.
	$(LOCALCLUSTER) up --images=$(IMAGES_DIR)

cluster-down: ## Stop the local cluster and remove what it made.
	$(LOCALCLUSTER) down

cluster-status: ## Show the local cluster's components and node.
	$(LOCALCLUSTER) status

demo: cluster-up ## A one-node cluster, the controller, and a running VM.
	KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) bash tools/dev/demo.sh

demo-down: cluster-down ## Stop the demo cluster.

test-e2e: test-images cluster-up capi ## End-to-end tests on the local cluster.
	$(CAPI_ENV) KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) go test -count=1 -timeout 20m -v ./tests/e2e/...
