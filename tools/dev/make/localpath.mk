# The local cluster's dynamic storage provisioner: rancher's local-path-provisioner, pinned and
# built from the Go module proxy (tools/dev/localpathbin), shipped as an image made by imagebuild.
LOCALPATH_VERSION := v0.0.30
LOCALPATH_DIR := $(VIRTPOD_CACHE)/local-path-provisioner-$(LOCALPATH_VERSION)
LOCALPATH_BIN := $(LOCALPATH_DIR)/local-path-provisioner

$(LOCALPATH_BIN):
	@mkdir -p $(LOCALPATH_DIR)
	cd tools/dev/localpathbin && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $@.tmp github.com/rancher/local-path-provisioner && mv $@.tmp $@

.PHONY: local-path-provisioner image-local-path-provisioner
local-path-provisioner: $(LOCALPATH_BIN) ## Build rancher's local-path-provisioner (the local cluster's StorageClass).

image-local-path-provisioner: imagebuild $(LOCALPATH_BIN)
	$(IMAGEBUILD_BIN) local-path-provisioner $(IMAGEBUILD_FLAGS) --binary=$(LOCALPATH_BIN) \
		--tag=localhost/virtpod/local-path-provisioner:$(LOCALPATH_VERSION) --out=$(IMAGES_DIR)/local-path-provisioner.tar
