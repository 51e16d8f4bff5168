# The Cluster API core manager, the kubeadm bootstrap provider, clusterctl and Cluster API's CRDs, pinned and built from the Go
# module proxy (tools/dev/capibin), for testing virtpod's infrastructure provider against them.
CAPI_VERSION := v1.14.2
CAPI_DIR := $(VIRTPOD_CACHE)/capi-$(CAPI_VERSION)
CAPI_LDFLAGS := -s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$(CAPI_VERSION) \
	-X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=14 \
	-X sigs.k8s.io/cluster-api/version.gitTreeState=clean
CAPI_BUILD := cd tools/dev/capibin && CGO_ENABLED=0 go build -trimpath -ldflags '$(CAPI_LDFLAGS)'

$(CAPI_DIR)/cluster-api-manager:
	@mkdir -p $(CAPI_DIR)
	$(CAPI_BUILD) -o $@.tmp sigs.k8s.io/cluster-api/core && mv $@.tmp $@

$(CAPI_DIR)/kubeadm-bootstrap-manager:
	@mkdir -p $(CAPI_DIR)
	$(CAPI_BUILD) -o $@.tmp sigs.k8s.io/cluster-api/bootstrap/kubeadm && mv $@.tmp $@

$(CAPI_DIR)/clusterctl:
	@mkdir -p $(CAPI_DIR)
	$(CAPI_BUILD) -o $@.tmp sigs.k8s.io/cluster-api/cmd/clusterctl && mv $@.tmp $@

$(CAPI_DIR)/crd/.copied:
	@mkdir -p $(CAPI_DIR)/crd
	cd tools/dev/capibin && go mod download sigs.k8s.io/cluster-api && \
		cp "$$(go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)"/core/config/crd/bases/*.yaml $(CAPI_DIR)/crd/
	chmod 644 $(CAPI_DIR)/crd/*.yaml && touch $@

# The kubeadm control plane's and bootstrap's kinds, without their controllers: a ClusterClass
# names their templates (config/clusterctl/templates/clusterclass-virtpod.yaml).
$(CAPI_DIR)/crd-kubeadm/.copied:
	@mkdir -p $(CAPI_DIR)/crd-kubeadm
	cd tools/dev/capibin && go mod download sigs.k8s.io/cluster-api && \
		dir="$$(go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)" && \
		cp "$$dir"/controlplane/kubeadm/config/crd/bases/*.yaml "$$dir"/bootstrap/kubeadm/config/crd/bases/*.yaml $(CAPI_DIR)/crd-kubeadm/
	chmod 644 $(CAPI_DIR)/crd-kubeadm/*.yaml && touch $@

.PHONY: capi
capi: $(CAPI_DIR)/cluster-api-manager $(CAPI_DIR)/kubeadm-bootstrap-manager $(CAPI_DIR)/clusterctl $(CAPI_DIR)/crd/.copied $(CAPI_DIR)/crd-kubeadm/.copied ## Build the Cluster API core manager and clusterctl, fetch its CRDs.

CAPI_ENV := TEST_ASSET_CAPI_MANAGER=$(CAPI_DIR)/cluster-api-manager TEST_ASSET_CAPI_CRDS=$(CAPI_DIR)/crd \
	TEST_ASSET_CAPI_KUBEADM_CRDS=$(CAPI_DIR)/crd-kubeadm TEST_ASSET_CAPI_KUBEADM_BOOTSTRAP=$(CAPI_DIR)/kubeadm-bootstrap-manager \
	TEST_ASSET_CLUSTERCTL=$(CAPI_DIR)/clusterctl TEST_ASSET_KUBE_CONTROLLER_MANAGER=$(K8S_BIN)/kube-controller-manager \
	TEST_ASSET_KUBEADM=$(K8S_BIN)/kubeadm

.PHONY: test-capi
test-capi: control-plane $(K8S_BIN)/kube-controller-manager $(K8S_BIN)/kubectl capi ## The Cluster API provider against a real API server and the real Cluster API core manager.
	$(ENVTEST_ENV) $(CAPI_ENV) KUBECTL=$(K8S_BIN)/kubectl go test -count=1 ./tests/capi/ ./pkg/clusterapi/controlplaneservice/ ./pkg/clusterapi/machinevm/

CLUSTERCTL_REPO ?= _output/clusterctl
.PHONY: clusterctl-repo
clusterctl-repo: $(K8S_BIN)/kubectl ## Write a clusterctl local repository for virtpod to $(CLUSTERCTL_REPO) (docs/capi.md).
	KUBECTL=$(K8S_BIN)/kubectl tools/dev/clusterctl-repo.sh $(CLUSTERCTL_REPO)
