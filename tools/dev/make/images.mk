# virtpod's container images, built without Docker by tools/imagebuild into $(IMAGES_DIR) as image
# archives for `ctr -n k8s.io images import`. Included from the top Makefile. See docs/images.md.
VIRTPOD_CACHE ?= $(HOME)/.cache/virtpod
GUEST_FIXTURE ?= $(VIRTPOD_CACHE)/guest
IMAGES_DIR    ?= $(VIRTPOD_CACHE)/images
# Extra flags for every image, e.g. --import --containerd-address=SOCK --ctr=PATH.
IMAGEBUILD_FLAGS ?=
# Tags of the images the dev loop rebuilds; the Tiltfile passes Tilt's $EXPECTED_REF.
RUNNER_IMAGE     ?= localhost/virtpod/runner:dev
GUEST_IMAGE      ?= localhost/virtpod/guest:dev
CONTROLLER_IMAGE ?= localhost/virtpod/controller:dev
IMAGEBUILD_BIN := $(VIRTPOD_CACHE)/bin/imagebuild

# Always rebuilt: the images depend on the Go sources and the host's QEMU packages, and the
# builds are reproducible, so an unchanged input gives the same archive.
.PHONY: images imagebuild image-runner image-runner-nohypervisor image-controller image-pause image-toolbox image-guest image-coredns

imagebuild:
	@mkdir -p $(dir $(IMAGEBUILD_BIN))
	go build -o $(IMAGEBUILD_BIN) ./tools/imagebuild

images: image-runner image-runner-nohypervisor image-controller image-pause image-toolbox image-guest image-coredns ## Build every virtpod image into $(IMAGES_DIR) (no Docker).

image-runner: imagebuild runner-deps
	$(IMAGEBUILD_BIN) runner $(IMAGEBUILD_FLAGS) --tag=$(RUNNER_IMAGE) --out=$(IMAGES_DIR)/runner.tar

image-runner-nohypervisor: imagebuild runner-deps
	$(IMAGEBUILD_BIN) runner $(IMAGEBUILD_FLAGS) --without-hypervisor --tag=localhost/virtpod/runner-nohypervisor:dev --out=$(IMAGES_DIR)/runner-nohypervisor.tar

image-controller: imagebuild
	$(IMAGEBUILD_BIN) controller $(IMAGEBUILD_FLAGS) --tag=$(CONTROLLER_IMAGE) --out=$(IMAGES_DIR)/controller.tar

image-pause: imagebuild
	$(IMAGEBUILD_BIN) pause $(IMAGEBUILD_FLAGS) --tag=localhost/virtpod/pause:3.10 --out=$(IMAGES_DIR)/pause.tar

image-toolbox: imagebuild runner-deps
	$(IMAGEBUILD_BIN) toolbox $(IMAGEBUILD_FLAGS) --tag=localhost/virtpod/toolbox:dev --out=$(IMAGES_DIR)/toolbox.tar

image-guest: imagebuild guest-fixture
	$(IMAGEBUILD_BIN) vm $(IMAGEBUILD_FLAGS) --tag=$(GUEST_IMAGE) --out=$(IMAGES_DIR)/guest.tar \
		--kernel=$(GUEST_FIXTURE)/boot/vmlinuz --initrd=$(GUEST_FIXTURE)/boot/initrd.img --disk=$(GUEST_FIXTURE)/disk/root.img

image-coredns: imagebuild $(COREDNS_BIN)/coredns
	$(IMAGEBUILD_BIN) coredns $(IMAGEBUILD_FLAGS) --binary=$(COREDNS_BIN)/coredns --tag=localhost/virtpod/coredns:$(COREDNS_VERSION) --out=$(IMAGES_DIR)/coredns.tar
