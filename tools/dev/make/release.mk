# Releases (docs/install.md): `make release VERSION=v0.1.0 REGISTRY=ghcr.io/acme` pushes the
# controller and the two runner images (Debian 13's, the default, and Debian 12's QEMU 7.2)
# tagged VERSION, and writes into $(RELEASE_DIR) install.yaml, infrastructure-components.yaml,
# providerclass-qemu-7.2.yaml, metadata.yaml, the cluster templates, images.json and the vmctl
# binaries, every image by digest (tools/release). Included from the top Makefile.
VERSION ?= v0.1.0-dev
REGISTRY ?=
# Set (to anything) for a registry that speaks plain HTTP, e.g. the local cluster's.
INSECURE_REGISTRY ?=
# A clusterctl local repository's layout: clusterctl can point at this folder as it is.
RELEASE_DIR ?= _output/release/infrastructure-virtpod/$(VERSION)
VMCTL_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
# The image archives a release pushes, each ARCHIVE or ARCHIVE=PATH in the registry
# (imagebuild push).
RELEASE_ARCHIVES ?= controller.tar runner.tar runner-debian12.tar

.PHONY: release release-assets

release: image-runner image-runner-debian12 image-controller release-assets ## Build, push and write a release: VERSION=vX.Y.Z REGISTRY=HOST[:PORT][/PREFIX] [INSECURE_REGISTRY=1].

# release-assets pushes the images already in $(IMAGES_DIR) (no rebuild).
release-assets: imagebuild
	@test -n "$(REGISTRY)" || { echo 'make release: set REGISTRY=HOST[:PORT][/PREFIX], e.g. REGISTRY=ghcr.io/acme (INSECURE_REGISTRY=1 for plain HTTP)' >&2; exit 1; }
	@mkdir -p $(RELEASE_DIR)
	$(IMAGEBUILD_BIN) push --registry=$(REGISTRY) $(if $(INSECURE_REGISTRY),--insecure) --version=$(VERSION) \
		--lock=$(RELEASE_DIR)/images.json $(addprefix $(IMAGES_DIR)/,$(RELEASE_ARCHIVES))
	@for p in $(VMCTL_PLATFORMS); do os=$${p%/*} arch=$${p#*/}; echo "vmctl $$os/$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags '-s -w' -o $(RELEASE_DIR)/vmctl-$$os-$$arch ./tools/vmctl || exit 1; done
	go run ./tools/release --version=$(VERSION) --lock=$(RELEASE_DIR)/images.json --out=$(RELEASE_DIR)

# The local cluster's registry (tools/dev/localcluster) and the two releases the end-to-end
# tests install: N, what `make release` ships, and for the upgrade test N-1 of the same tree as
# the release before Debian 13's runner was: Debian 12's QEMU 7.2 runner as virtpod/runner.
LOCAL_REGISTRY := 10.217.0.1:5000
E2E_RELEASES   := $(VIRTPOD_CACHE)/e2e-releases
E2E_VERSION    := v0.1.0-e2e.1
E2E_PREVIOUS   := v0.1.0-e2e.0
E2E_ENV := VIRTPOD_RELEASE=$(E2E_RELEASES)/$(E2E_VERSION) VIRTPOD_RELEASE_PREVIOUS=$(E2E_RELEASES)/$(E2E_PREVIOUS)

.PHONY: e2e-releases
e2e-releases: ## Push the two releases the end-to-end tests install to the local cluster's registry (after cluster-up).
	@$(MAKE) --no-print-directory release-assets VERSION=$(E2E_VERSION) REGISTRY=$(LOCAL_REGISTRY) INSECURE_REGISTRY=1 \
		RELEASE_DIR=$(E2E_RELEASES)/$(E2E_VERSION) VMCTL_PLATFORMS=linux/amd64
	@$(MAKE) --no-print-directory release-assets VERSION=$(E2E_PREVIOUS) REGISTRY=$(LOCAL_REGISTRY) INSECURE_REGISTRY=1 \
		RELEASE_DIR=$(E2E_RELEASES)/$(E2E_PREVIOUS) VMCTL_PLATFORMS=linux/amd64 \
		RELEASE_ARCHIVES="controller.tar runner-debian12.tar=virtpod/runner runner-debian12.tar"
