# virtpod — run virtual machines inside Kubernetes pods.
SHELL := /bin/bash
.DEFAULT_GOAL := help

include tools/dev/make/k8sbins.mk
include tools/dev/make/runner.mk
include tools/dev/make/images.mk
include tools/dev/make/cluster.mk
include tools/dev/make/agent.mk
include tools/dev/make/capi.mk
include tools/dev/make/storage.mk
include tools/dev/make/release.mk

CONTROLLER_GEN := go tool controller-gen

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-20s %s\n", $$1, $$2}'

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and RBAC from the Go types and markers.
	$(CONTROLLER_GEN) object paths=./apis/...
	$(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./apis/vm/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./apis/infrastructure/... output:crd:artifacts:config=config/capi/crd/bases
	go run ./tools/dev/templatecrd config/capi/crd/bases/infrastructure.cluster.x-k8s.io_virtpodmachinetemplates.yaml
	$(CONTROLLER_GEN) rbac:roleName=virtpod-controller paths="./controllers/vm/...;./controllers/migration/...;./controllers/providerclass/...;./controllers/imagemapwatch/...;./controllers/manager/...;./controllers/snapshot/..." output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=virtpod-capi-controller paths="./controllers/clusterapi/virtpodcluster/...;./controllers/clusterapi/virtpodmachine/...;./controllers/clusterapi/virtpodmachinetemplate/..." output:rbac:artifacts:config=config/capi/rbac

.PHONY: verify-generated
verify-generated: generate ## Fail when generated files differ from what is committed.
	@git diff --exit-code --stat -- apis config || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- apis config)" || { git status --porcelain -- apis config; echo "untracked generated files: run 'make generate' and commit"; exit 1; }

.PHONY: vet
vet: ## gofmt, go vet and a go.mod tidiness check.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "run gofmt -w on these files"; exit 1; }
	go vet ./...
	go mod tidy -diff

ENVTEST_ENV := KUBEBUILDER_ASSETS= TEST_ASSET_KUBE_APISERVER=$(K8S_BIN)/kube-apiserver TEST_ASSET_ETCD=$(ETCD_BIN)/etcd

# The packages under DIRS whose tests run on a real API server (they import tests/kubeapi), from
# go list, so a new one is never left out: $(call envtest_pkgs,./apis/... ./controllers/...).
envtest_pkgs = $(shell go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' $(1) | awk '/ github.com\/virtpod\/virtpod\/tests\/kubeapi( |$$)/ {print $$1}')

.PHONY: test-controller
test-controller: control-plane ## Controller and API tests against a real kube-apiserver and etcd (the node agent's: make test-agent).
	$(ENVTEST_ENV) go test -count=1 $(call envtest_pkgs,./apis/... ./controllers/... ./pkg/...)

# Everything `go test ./...` needs to find: the API server, Cluster API, the releases, the guests
# and the local cluster.
TEST_ENV = $(ENVTEST_ENV) $(CAPI_ENV) $(E2E_ENV) VIRTPOD_GUEST=$(GUEST_FIXTURE) VIRTPOD_DEBIAN_GUEST=$(DEBIAN_GUEST) VIRTPOD_QEMU_NEXT=$(QEMU_NEXT) \
	VIRTPOD_IMAGES=$(IMAGES_DIR) KUBECTL=$(KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG)

# The steps, their order and what runs beside what live in tools/dev/ci/test.sh, which ends with
# the timing report (docs/ci.md).
.PHONY: test
test: ## Everything CI runs: every package, a real API server, real guests, the local cluster; a timing report.
	@MAKE=$(MAKE) bash tools/dev/ci/test.sh

# `make -s print-VAR` prints a variable's value, for the scripts that share this Makefile's paths.
print-%:
	@echo '$($*)'

.PHONY: bench-controller
bench-controller: control-plane ## 1,000 VMs against a real API server: time to pods and status, requests, CPU, RSS.
	$(ENVTEST_ENV) go test -run '^$$' -bench BenchmarkCreateVMs -benchtime 1x -count 1 ./controllers/vm/ $(BENCH_ARGS)

.PHONY: bench-sidebyside
bench-sidebyside: control-plane ## virtpod's controller against NeonVM's (source in NEONVM_SRC), 1,000 VMs, fresh API server per run.
	$(ENVTEST_ENV) go test -run '^$$' -bench BenchmarkSideBySide -benchtime 1x -count 1 -timeout 60m ./tests/sidebyside/ $(BENCH_ARGS)

.PHONY: bench-write-cost
bench-write-cost: control-plane ## What each write of a VM's creation costs kube-apiserver and etcd in CPU, one kind at a time.
	$(ENVTEST_ENV) go test -run '^$$' -bench BenchmarkWriteCost -benchtime 1x -count 1 ./controllers/vm/ $(BENCH_ARGS)

.PHONY: bench-controller-5k
bench-controller-5k: control-plane ## 5,000 VMs whose pods run on 50 simulated nodes: time to Running, requests, CPU, RSS.
	$(ENVTEST_ENV) VIRTPOD_BENCH_VMS=5000 VIRTPOD_BENCH_NODES=50 go test -run '^$$' -bench BenchmarkCreateVMs -benchtime 1x -count 1 -timeout 60m ./controllers/vm/ $(BENCH_ARGS)

.PHONY: test-stress
test-stress: ## The packages with real clusters and guests, STRESS_RUNS times under stress-ng CPU load: each test's pass count (docs/ci.md).
	@MAKE=$(MAKE) bash tools/dev/ci/stress.sh

.PHONY: test-faults
test-faults: control-plane $(K8S_BIN)/kube-controller-manager ## The controller killed, the control plane restarted, nodes lost (tests/faults).
	$(ENVTEST_ENV) go test -count=1 -v ./tests/faults/

.PHONY: soak
soak: control-plane $(K8S_BIN)/kube-controller-manager ## Churn VMs against the real controller for VIRTPOD_SOAK_MINUTES (default 10): leaks, memory, goroutines.
	$(ENVTEST_ENV) go test -run '^$$' -bench BenchmarkSoak -benchtime 1x -count 1 -timeout 60m ./tests/faults/ $(BENCH_ARGS)

.PHONY: build
build: ## Build the controller binary.
	CGO_ENABLED=0 go build -trimpath -o bin/virtpod-controller ./cmd/virtpod-controller

# `make install` puts vmctl on PATH, and beside it the name kubectl looks for plugins under, so
# `kubectl virtpod ...` is the same binary (docs/vmctl.md).
PREFIX ?= /usr/local
.PHONY: install
install: ## Install vmctl and the kubectl plugin kubectl-virtpod into $(PREFIX)/bin (PREFIX=/usr/local).
	CGO_ENABLED=0 go build -trimpath -o bin/vmctl ./tools/vmctl
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 bin/vmctl $(DESTDIR)$(PREFIX)/bin/vmctl
	ln -sf vmctl $(DESTDIR)$(PREFIX)/bin/kubectl-virtpod

FUZZTIME ?= 5m
.PHONY: fuzz-imagemap
fuzz-imagemap: ## Fuzz the image map's parsing and resolving for $(FUZZTIME).
	go test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -parallel 1 ./pkg/image/imagemap/

# Each input costs the podspec target a few API requests: minimizing every new input for the
# default 60 s would leave it minimizing most of the run.
.PHONY: fuzz-podspec
fuzz-podspec: control-plane ## Fuzz runner-pod rendering, checked by a real API server, for $(FUZZTIME).
	$(ENVTEST_ENV) go test -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x -parallel 1 ./pkg/podspec/

.PHONY: fuzz-qemu
fuzz-qemu: ## Fuzz the QEMU command line against argument and option injection for $(FUZZTIME).
	go test -run '^$$' -fuzz '^FuzzArgs$$' -fuzztime $(FUZZTIME) -parallel 1 ./pkg/qemu/

.PHONY: fuzz-cloudhypervisor
fuzz-cloudhypervisor: ## Fuzz the cloud-hypervisor vm.create body and command line for $(FUZZTIME).
	go test -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZTIME) -parallel 1 ./pkg/cloudhypervisor/

.PHONY: fuzz-runnerconfig
fuzz-runnerconfig: ## Fuzz the runner flags' render-and-parse round trip for $(FUZZTIME).
	go test -run '^$$' -fuzz '^FuzzArgsRoundTrip$$' -fuzztime $(FUZZTIME) -parallel 1 ./pkg/runnerconfig/

.PHONY: fuzz-pvhkernel
fuzz-pvhkernel: ## Fuzz unpacking a bzImage to its PVH kernel with hostile files for $(FUZZTIME).
	go test -run '^$$' -fuzz '^FuzzUnpack$$' -fuzztime $(FUZZTIME) -parallel 1 ./pkg/kernel/pvhkernel/

.PHONY: fuzz
fuzz: ## Run the six fuzz targets one after another, $(FUZZTIME) each; fails if any failed.
	@rc=0; for t in imagemap podspec qemu cloudhypervisor runnerconfig pvhkernel; do \
		$(MAKE) --no-print-directory fuzz-$$t || rc=1; \
	done; exit $$rc
