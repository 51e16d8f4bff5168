# The local one-node cluster (tools/dev/localcluster), `make demo`, and the end-to-end tests.
LOCALCLUSTER := go run ./tools/dev/localcluster
KUBECTL      := $(K8S_BIN)/kubectl
CLUSTER_KUBECONFIG := $(VIRTPOD_CACHE)/cluster/kubeconfig/admin.kubeconfig

.PHONY: cluster-binaries cluster-up cluster-down cluster-status cluster-node-up cluster-node-down demo demo-down test-e2e

cluster-binaries: k8s-binaries containerd registry runner-deps ## Build every binary the local cluster runs.

cluster-up: cluster-binaries images ## Start the local cluster (registry and DNS included) and push virtpod's images to its registry.
	$(MAKE) --no-print-directory cluster-start

# cluster-up without its builds, for make test, which times them as steps of their own.
.PHONY: cluster-start
cluster-start:
	$(LOCALCLUSTER) up --images=$(IMAGES_DIR)

cluster-down: ## Stop the local cluster and remove what it made.
	$(LOCALCLUSTER) down

cluster-status: ## Show the local cluster's components and node.
	$(LOCALCLUSTER) status

cluster-node-up: ## Add a second node to the running local cluster (docs/local-cluster.md#a-second-node).
	$(LOCALCLUSTER) node-up

cluster-node-down: ## Stop the second node and remove what it made, its Node object included.
	$(LOCALCLUSTER) node-down

DEMO_RELEASE := $(VIRTPOD_CACHE)/demo-release
# GUEST=debian runs the Debian cloud guest (config/samples/debian) instead of the quick test guest.
GUEST ?= test
BENCH_COUNT ?= 3

demo: $(if $(filter debian,$(GUEST)),image-debian-guest) cluster-up ## A one-node cluster, virtpod installed from a release in its registry, and a running VM (GUEST=debian: the Debian cloud guest).
	$(MAKE) --no-print-directory release-assets REGISTRY=$(LOCAL_REGISTRY) INSECURE_REGISTRY=1 RELEASE_DIR=$(DEMO_RELEASE) VMCTL_PLATFORMS=linux/amd64
	GUEST=$(GUEST) KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) bash tools/dev/demo.sh $(DEMO_RELEASE)

demo-down: cluster-down ## Stop the demo cluster.

test-e2e: test-images cluster-up capi ## End-to-end tests on the local cluster, installing releases from its registry.
	$(MAKE) --no-print-directory e2e-releases
	$(E2E_ENV) $(CAPI_ENV) KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) go test -count=1 -timeout 45m -v ./tests/e2e/...

.PHONY: bench-apply
bench-apply: image-debian-guest cluster-up ## kubectl apply of the Debian cloud guest -> Running -> DHCP ACK -> cloud-init final, on the local cluster (BENCH_COUNT runs).
	$(MAKE) --no-print-directory e2e-releases
	$(E2E_ENV) KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) go test -run '^$$' -bench BenchmarkDebianApplyToCloudInitFinal -benchtime 1x -count $(BENCH_COUNT) -timeout 60m ./tests/e2e/

# Node benchmarks on the local cluster (docs/benchmarks.md). They read the pods' cgroups and
# processes on this machine, which is the cluster's node: run as root.
BENCH_VMS ?=
BENCH_NODE_ENV = $(E2E_ENV) KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) $(if $(BENCH_VMS),VIRTPOD_BENCH_VMS=$(BENCH_VMS))
.PHONY: bench-overhead bench-many bench-start bench-resize-cluster soak-node

bench-overhead: cluster-up ## A 256 MiB and a 1 GiB guest's pod memory beyond the guest (cgroup, runner and QEMU RSS), idle and with its memory touched.
	$(MAKE) --no-print-directory e2e-releases
	$(BENCH_NODE_ENV) go test -run '^$$' -bench BenchmarkVMOverhead -benchtime 1x -count 1 -timeout 30m ./tests/e2e/

bench-resize-cluster: cluster-up ## One running guest resized by spec patches, memory up 128Mi at a time and back: patch -> status.guest and the guest's own report (medians).
	$(MAKE) --no-print-directory e2e-releases
	$(E2E_ENV) KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) go test -run '^$$' -bench BenchmarkClusterResize -benchtime 1x -count 1 -timeout 20m ./tests/e2e/

bench-many: cluster-up ## As many small emulated VMs as the node holds by requests (BENCH_VMS=N to choose), applied at once: time to all Running; agent and device plugin within their requests.
	$(MAKE) --no-print-directory e2e-releases
	$(BENCH_NODE_ENV) go test -run '^$$' -bench BenchmarkManyVMs -benchtime 1x -count 1 -timeout 40m ./tests/e2e/

bench-start: cluster-up ## BENCH_VMS (default 20, or as many as the node holds) small VMs applied at once, then one at a time: apply -> Running -> guest ready, p50/p95/max per stage.
	$(MAKE) --no-print-directory e2e-releases
	$(BENCH_NODE_ENV) go test -run '^$$' -bench BenchmarkStart -benchtime 1x -count 1 -timeout 60m ./tests/e2e/

soak-node: cluster-up ## Churn VMs on the local cluster's node for VIRTPOD_SOAK_MINUTES (default 10): control files, netns, links, nftables, processes, the agent's heap, goroutines and fds left over.
	$(MAKE) --no-print-directory e2e-releases
	$(BENCH_NODE_ENV) go test -run '^$$' -bench BenchmarkNodeSoak -benchtime 1x -count 1 -timeout 60m ./tests/e2e/
