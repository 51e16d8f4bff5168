# Storage: the local cluster's dynamic provisioner (rancher's local-path-provisioner, pinned,
# built from the Go module proxy in tools/dev/localpathbin, shipped as an image imagebuild makes)
# and the disk benchmark. Included from the top Makefile.
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

.PHONY: bench-disk
bench-disk: guest-fixture ## Disk throughput in the guest (TCG) vs on the host, same file, plus filling a 1 GiB claim from an image.
	VIRTPOD_GUEST=$(GUEST_FIXTURE) go test -run '^$$' -bench BenchmarkDisk -benchtime 1x -count 1 ./runner/ $(BENCH_ARGS)
	go test -run '^$$' -bench BenchmarkFill1GiB -benchtime 1x -count 3 ./pkg/disk/volumedisk/ $(BENCH_ARGS)

.PHONY: fuzz-disks
fuzz-disks: ## Fuzz the runner's --disk/--root-volume flags' render-and-parse round trip for $(FUZZTIME).
	go test -run '^$$' -fuzz '^FuzzDiskRoundTrip$$' -fuzztime $(FUZZTIME) -parallel 1 ./pkg/runnerconfig/
