# virtpod's container images, built without Docker by tools/imagebuild into $(IMAGES_DIR) as image
# archives for `ctr -n k8s.io images import`. Included from the top Makefile. See docs/images.md.
VIRTPOD_CACHE ?= $(HOME)/.cache/virtpod
GUEST_FIXTURE ?= $(VIRTPOD_CACHE)/guest
IMAGES_DIR    ?= $(VIRTPOD_CACHE)/images
# Extra flags for every image, e.g. --import --containerd-address=SOCK --ctr=PATH.
IMAGEBUILD_FLAGS ?=
# Tags of the images the dev loop rebuilds; the Tiltfile passes Tilt's $EXPECTED_REF.
RUNNER_IMAGE     ?= localhost/virtpod/runner:dev
RUNNER_DEBIAN12_IMAGE ?= localhost/virtpod/runner-debian12:dev
GUEST_IMAGE      ?= localhost/virtpod/guest:dev
CONTROLLER_IMAGE ?= localhost/virtpod/controller:dev
IMAGEBUILD_BIN := $(VIRTPOD_CACHE)/bin/imagebuild

# Always rebuilt: the images depend on the Go sources and the host's QEMU packages, and the
# builds are reproducible, so an unchanged input gives the same archive.
.PHONY: images imagebuild image-runner image-runner-debian12 image-runner-nohypervisor image-controller image-pause image-toolbox image-guest image-coredns

imagebuild:
	@mkdir -p $(dir $(IMAGEBUILD_BIN))
	go build -o $(IMAGEBUILD_BIN) ./tools/imagebuild

images: image-runner image-runner-debian12 image-runner-nohypervisor image-controller image-pause image-toolbox image-guest image-local-path-provisioner image-coredns ## Build every virtpod image into $(IMAGES_DIR) (no Docker).

# The runner image: Debian 13's QEMU 10.0 and virtiofsd (make qemu-next builds its root tree),
# everything the API offers. The release's default (the controller's --runner-image, the node
# agent's image).
image-runner: imagebuild runner-deps qemu-next ## The runner image (Debian 13's QEMU 10.0 and virtiofsd), $(IMAGES_DIR)/runner.tar.
	$(IMAGEBUILD_BIN) runner $(IMAGEBUILD_FLAGS) --qemu-root=$(QEMU_NEXT)/root --tag=$(RUNNER_IMAGE) --out=$(IMAGES_DIR)/runner.tar

# The runner image with this machine's (Debian 12's) QEMU 7.2 and no virtiofsd, for clusters
# that need QEMU 7.2: the release ships it, and its providerclass-qemu-7.2.yaml makes it the qemu
# class's runner (docs/providers.md). It was the default before Debian 13's.
image-runner-debian12: imagebuild runner-deps ## The runner image with Debian 12's QEMU 7.2 (no virtio-fs), $(IMAGES_DIR)/runner-debian12.tar.
	$(IMAGEBUILD_BIN) runner $(IMAGEBUILD_FLAGS) --tag=$(RUNNER_DEBIAN12_IMAGE) --out=$(IMAGES_DIR)/runner-debian12.tar

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

# VM images only the tests use (and `make demo GUEST=debian`), so plain `make images`, and with it
# `make demo`, stays quick: `make test` and `make test-e2e` build them into $(IMAGES_DIR), and
# cluster-up imports every archive there.
DEBIAN_IMAGE ?= localhost/virtpod/debian:dev
# The Debian guest's raw disk as qcow2: the image's /disk/debian-12.qcow2, KubeVirt's
# containerDisk layout, converted again only when the raw disk is newer.
DEBIAN_QCOW2 := $(VIRTPOD_CACHE)/debian-qcow2/debian-12.qcow2

.PHONY: test-images image-debian-guest image-guest-bzimage image-test-vms node-image image-tenant-control-plane

test-images: image-debian-guest image-guest-bzimage image-test-vms node-image image-tenant-control-plane ## Build the tests' images: the Debian cloud guest (qcow2, containerDisk layout), the test guest's kernel as a bzImage, nobootloader, twodisks, the Kubernetes node, a tenant's control plane.

# The test guest's kernel kept as the bzImage it is, as images built by other tools hold one: the
# node agent unpacks it for QEMU (pkg/kernel/kernelcache; TestVMLifecycle boots it).
image-guest-bzimage: imagebuild guest-fixture ## The test guest's kernel and initrd, the kernel a bzImage, localhost/virtpod/guest-bzimage:dev.
	$(IMAGEBUILD_BIN) vm $(IMAGEBUILD_FLAGS) --keep-bzimage --tag=localhost/virtpod/guest-bzimage:dev --out=$(IMAGES_DIR)/guest-bzimage.tar \
		--kernel=$(GUEST_FIXTURE)/boot/vmlinuz --initrd=$(GUEST_FIXTURE)/boot/initrd.img

image-debian-guest: imagebuild debian-guest ## The Debian cloud guest as a VM image, $(DEBIAN_IMAGE), disk at /disk/debian-12.qcow2.
	@mkdir -p $(dir $(DEBIAN_QCOW2))
	@if [ ! $(DEBIAN_QCOW2) -nt $(DEBIAN_GUEST)/disk/root.img ]; then \
		echo "qemu-img convert -O qcow2 $(DEBIAN_GUEST)/disk/root.img $(DEBIAN_QCOW2)"; \
		qemu-img convert -O qcow2 $(DEBIAN_GUEST)/disk/root.img $(DEBIAN_QCOW2).tmp && mv $(DEBIAN_QCOW2).tmp $(DEBIAN_QCOW2); \
	fi
	$(IMAGEBUILD_BIN) vm $(IMAGEBUILD_FLAGS) --tag=$(DEBIAN_IMAGE) --out=$(IMAGES_DIR)/debian.tar \
		--disk=$(DEBIAN_QCOW2) --disk-name=debian-12.qcow2

image-test-vms: ## VM images that must fail: localhost/virtpod/nobootloader:dev and localhost/virtpod/twodisks:dev (tools/dev/testvmimages).
	go run ./tools/dev/testvmimages -out $(IMAGES_DIR)

# The Kubernetes node image (docs/capi.md): the Debian guest plus containerd, runc, the CNI
# plugins, kubelet and kubeadm at the versions this Makefile pins, what Cluster API's
# image-builder makes for other providers. Its archive is rebuilt only when its disk changed.
NODE_IMAGE_DIR := $(VIRTPOD_CACHE)/node-image
NODE_IMAGE     ?= localhost/virtpod/node:$(K8S_VERSION)
NODE_QCOW2     := $(VIRTPOD_CACHE)/node-qcow2/node.qcow2

node-image: imagebuild runner-deps $(K8S_BIN)/kubelet $(K8S_BIN)/kubeadm $(CONTAINERD_BIN)/containerd ## The Kubernetes node image for Cluster API workers, $(NODE_IMAGE), disk at /disk/node.qcow2.
	go run ./tools/dev/debianguest -node -out $(NODE_IMAGE_DIR) -kubernetes-version=$(K8S_VERSION) \
		-kubelet=$(K8S_BIN)/kubelet -kubeadm=$(K8S_BIN)/kubeadm -containerd-bin=$(CONTAINERD_BIN)
	@mkdir -p $(dir $(NODE_QCOW2))
	@if [ ! $(NODE_QCOW2) -nt $(NODE_IMAGE_DIR)/disk/root.img ]; then \
		echo "qemu-img convert -O qcow2 $(NODE_IMAGE_DIR)/disk/root.img $(NODE_QCOW2)"; \
		qemu-img convert -O qcow2 $(NODE_IMAGE_DIR)/disk/root.img $(NODE_QCOW2).tmp && mv $(NODE_QCOW2).tmp $(NODE_QCOW2); \
	fi
	@if [ ! $(IMAGES_DIR)/node.tar -nt $(NODE_QCOW2) ]; then \
		echo "imagebuild vm --tag=$(NODE_IMAGE)"; \
		$(IMAGEBUILD_BIN) vm $(IMAGEBUILD_FLAGS) --tag=$(NODE_IMAGE) --out=$(IMAGES_DIR)/node.tar --disk=$(NODE_QCOW2) --disk-name=node.qcow2; \
	fi

# A tenant's control plane as Kamaji hosts one, for the tests of Cluster API workers (docs/kamaji.md):
# one image for its four containers, from the binaries this Makefile pins.
TENANT_CP_IMAGE ?= localhost/virtpod/tenant-control-plane:$(K8S_VERSION)
TENANT_CP_BINS  := $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kube-controller-manager $(K8S_BIN)/kube-scheduler $(ETCD_BIN)/etcd

image-tenant-control-plane: $(IMAGES_DIR)/tenant-control-plane.tar ## A tenant's control plane (etcd, kube-apiserver, controller-manager, scheduler), $(TENANT_CP_IMAGE).
$(IMAGES_DIR)/tenant-control-plane.tar: $(TENANT_CP_BINS) | imagebuild
	$(IMAGEBUILD_BIN) tenant-control-plane $(IMAGEBUILD_FLAGS) --tag=$(TENANT_CP_IMAGE) --out=$@ \
		--apiserver-binary=$(K8S_BIN)/kube-apiserver --controller-manager-binary=$(K8S_BIN)/kube-controller-manager \
		--scheduler-binary=$(K8S_BIN)/kube-scheduler --etcd-binary=$(ETCD_BIN)/etcd
