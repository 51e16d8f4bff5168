# Pinned control-plane binaries, built from the Go module proxy into a cache this Makefile owns.
# Every Kubernetes binary is built with the same flags so later builds reuse the Go build cache.
K8S_VERSION  := v1.37.2
ETCD_VERSION := v3.6.16
VIRTPOD_CACHE ?= $(HOME)/.cache/virtpod
K8S_BIN  := $(VIRTPOD_CACHE)/k8s-$(K8S_VERSION)
ETCD_BIN := $(VIRTPOD_CACHE)/etcd-$(ETCD_VERSION)

K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/component-base/version.buildDate=2026-11-01T00:00:00Z \
	-X k8s.io/client-go/pkg/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=37
K8S_BUILD := cd tools/dev/k8sbins && CGO_ENABLED=0 go build -trimpath -ldflags '$(K8S_LDFLAGS)'

$(K8S_BIN)/kube-apiserver:
	@mkdir -p $(K8S_BIN)
	$(K8S_BUILD) -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver && mv $@.tmp $@

K8S_CMDS := kube-controller-manager kube-scheduler kubelet kubectl kube-proxy kubeadm
$(addprefix $(K8S_BIN)/,$(K8S_CMDS)): $(K8S_BIN)/%:
	@mkdir -p $(K8S_BIN)
	$(K8S_BUILD) -o $@.tmp k8s.io/kubernetes/cmd/$* && mv $@.tmp $@

# One go build for every Kubernetes binary still missing, so one process compiles the packages
# they share once and links them side by side; the single-binary rules above serve targets that
# need one (test-controller needs only kube-apiserver).
K8S_ALL := kube-apiserver $(K8S_CMDS)
.PHONY: k8s-binaries
k8s-binaries: $(ETCD_BIN)/etcd ## Build every Kubernetes binary the local cluster needs.
	@missing=""; for c in $(K8S_ALL); do [ -x $(K8S_BIN)/$$c ] || missing="$$missing k8s.io/kubernetes/cmd/$$c"; done; \
	if [ -n "$$missing" ]; then \
		rm -rf $(K8S_BIN)/.build && mkdir -p $(K8S_BIN)/.build && \
		echo "go build$$missing" && $(K8S_BUILD) -o $(K8S_BIN)/.build/ $$missing && \
		mv $(K8S_BIN)/.build/* $(K8S_BIN)/ && rmdir $(K8S_BIN)/.build; \
	fi

$(ETCD_BIN)/etcd:
	@mkdir -p $(ETCD_BIN)
	cd tools/dev/etcdbin && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $@.tmp go.etcd.io/etcd/server/v3 && mv $@.tmp $@

.PHONY: control-plane
control-plane: $(K8S_BIN)/kube-apiserver $(ETCD_BIN)/etcd ## Build kube-apiserver and etcd for envtest.

# containerd v2 (image volumes need >= 2.1), its runc shim and ctr.
CONTAINERD_VERSION := v2.4.2
CONTAINERD_BIN := $(VIRTPOD_CACHE)/containerd-$(CONTAINERD_VERSION)
CONTAINERD_CMDS := containerd containerd-shim-runc-v2 ctr
CONTAINERD_BUILD := cd tools/dev/containerdbin && CGO_ENABLED=0 go build -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
	-ldflags '-s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)'
# All three in one go build when any is missing, as the Kubernetes binaries are.
$(addprefix $(CONTAINERD_BIN)/,$(CONTAINERD_CMDS)) &:
	rm -rf $(CONTAINERD_BIN)/.build && mkdir -p $(CONTAINERD_BIN)/.build
	$(CONTAINERD_BUILD) -o $(CONTAINERD_BIN)/.build/ $(addprefix github.com/containerd/containerd/v2/cmd/,$(CONTAINERD_CMDS))
	mv $(CONTAINERD_BIN)/.build/* $(CONTAINERD_BIN)/ && rmdir $(CONTAINERD_BIN)/.build

.PHONY: containerd
containerd: $(addprefix $(CONTAINERD_BIN)/,$(CONTAINERD_CMDS)) ## Build containerd, the runc shim and ctr.

# The local cluster's OCI registry (CNCF distribution; tools/dev/registrybin).
REGISTRY_VERSION := v3.1.2
REGISTRY_BIN := $(VIRTPOD_CACHE)/registry-$(REGISTRY_VERSION)
$(REGISTRY_BIN)/registry:
	@mkdir -p $(REGISTRY_BIN)
	cd tools/dev/registrybin && CGO_ENABLED=0 go build -trimpath \
		-ldflags '-s -w -X github.com/distribution/distribution/v3/version.version=$(REGISTRY_VERSION)' \
		-o $@.tmp github.com/distribution/distribution/v3/cmd/registry && mv $@.tmp $@

.PHONY: registry
registry: $(REGISTRY_BIN)/registry ## Build the local cluster's registry (distribution).

# The local cluster's DNS: CoreDNS with only the plugins it uses (tools/dev/corednsbin).
COREDNS_VERSION := v1.15.0
COREDNS_BIN := $(VIRTPOD_CACHE)/coredns-$(COREDNS_VERSION)
$(COREDNS_BIN)/coredns: tools/dev/corednsbin/main.go
	@mkdir -p $(COREDNS_BIN)
	cd tools/dev/corednsbin && CGO_ENABLED=0 go build -trimpath \
		-ldflags '-s -w -X github.com/coredns/coredns/coremain.GitCommit=$(COREDNS_VERSION)' \
		-o $@.tmp . && mv $@.tmp $@

.PHONY: coredns
coredns: $(COREDNS_BIN)/coredns ## Build the local cluster's DNS server (CoreDNS, minimal plugins).

# Every pinned tool module's sources (and the main module's), fetched before they are compiled:
# the download is network time that `make test` spends beside its first compiles.
TOOL_MODULES := k8sbins etcdbin capibin containerdbin registrybin corednsbin localpathbin
.PHONY: download-modules
download-modules: ## Download the main module's and every pinned tool module's dependencies.
	go mod download
	@for d in $(TOOL_MODULES); do (cd tools/dev/$$d && go mod download) || exit 1; done
