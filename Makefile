# Build, install, package and test the CNI plugins.
DESTDIR ?=
CNI_BIN_DIR ?= /opt/cni/bin
# flannel is vxlan-flannel under the name of flannel's own CNI plugin ("type": "flannel").
PLUGINS := host-local bridge vxlan-flannel flannel
VERSION := $(shell node -p 'require("./package.json").version')
# The architecture the standalone executables, the package and the image are built for (Debian's
# names): this machine's by default; ARCH=arm64 on an amd64 machine too (the arm64 Node runs
# through qemu-user: scripts/test-prereqs.sh sets it up). amd64's artifacts keep their names;
# another architecture's carry it, so one never replaces the other's.
ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
STANDALONE_DIR := $(if $(filter amd64,$(ARCH)),dist/bin,dist/$(ARCH)/bin)
DEB := dist/cni-ts_$(VERSION)_$(ARCH).deb
IMAGE_TAR := $(if $(filter amd64,$(ARCH)),dist/cni-ts-image.tar,dist/cni-ts-image-$(ARCH).tar)

.PHONY: all build standalone install install-standalone uninstall deb image test test-unit test-integration test-prereqs test-artifacts typecheck bench clean

all: build

node_modules: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch node_modules

# bin/<plugin>: small scripts for hosts with Node.js 20 or newer.
build: node_modules
	node build.mjs

# dist/bin/<plugin> (dist/<arch>/bin for another ARCH): one standalone executable (no Node.js
# needed) under every plugin name.
standalone: node_modules
	node build.mjs --standalone --arch=$(ARCH)

install: build
	install -d -m 0755 $(DESTDIR)$(CNI_BIN_DIR)
	install -m 0755 $(addprefix bin/,$(PLUGINS)) $(DESTDIR)$(CNI_BIN_DIR)/

# The names are hard links of one file: installed once, linked under the others.
install-standalone: standalone
	install -d -m 0755 $(DESTDIR)$(CNI_BIN_DIR)
	install -m 0755 $(STANDALONE_DIR)/$(firstword $(PLUGINS)) $(DESTDIR)$(CNI_BIN_DIR)/
	for p in $(wordlist 2,$(words $(PLUGINS)),$(PLUGINS)); do \
	  ln -f $(DESTDIR)$(CNI_BIN_DIR)/$(firstword $(PLUGINS)) $(DESTDIR)$(CNI_BIN_DIR)/$$p; done

# Removes what install or install-standalone put there, nothing else.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(CNI_BIN_DIR)/,$(PLUGINS))

# dist/cni-ts_<version>_<arch>.deb: the standalone executables, the
# vxlan-flannel systemd unit and the sample configs (packaging/deb.sh).
deb: standalone
	bash packaging/deb.sh $(VERSION) $(ARCH) $(DEB) $(STANDALONE_DIR)

# dist/cni-ts-image.tar (dist/cni-ts-image-<arch>.tar for another ARCH, under the
# same name): the container image kube-flannel.yml's DaemonSet runs
# (deploy/kube-flannel.yml), as an archive `podman load` and `ctr images
# import` accept, named $(IMAGE_REF). Built without a container engine: a
# Debian layer made by mmdebstrap from Debian's mirror (packaging/image/base.sh,
# kept in .cache/ and rebuilt only when its scripts change), and a layer
# holding the standalone executable under every plugin name in /opt/cni-ts/bin.
IMAGE_REF := localhost/cni-ts:$(VERSION)
IMAGE_BASE_KEY := $(shell cat packaging/image/base.sh packaging/image/trim.sh packaging/image/iptables-wrapper 2>/dev/null | sha256sum | cut -c1-16)
IMAGE_BASE := .cache/image-base-$(ARCH)-$(IMAGE_BASE_KEY).tar

image: standalone $(IMAGE_BASE)
	IMAGE_ARCH=$(ARCH) node packaging/image/archive.mjs $(IMAGE_TAR) $(IMAGE_BASE) $(STANDALONE_DIR)/vxlan-flannel $(IMAGE_REF)

$(IMAGE_BASE):
	mkdir -p .cache
	bash packaging/image/base.sh $@.tmp $(ARCH)
	mv $@.tmp $@

typecheck: node_modules
	npx tsc --noEmit -p .

# The Debian packages the suite runs against: installed when missing (as root),
# or the one command to run is printed.
test-prereqs:
	bash scripts/test-prereqs.sh

# The whole suite: type check, unit tests, then the integration tests, which
# need root (network namespaces, the Go reference plugins from Debian) and
# drive both the scripts and the standalone executables (and the image, run
# with podman as a kubelet would run deploy/kube-flannel.yml), amd64's and,
# through qemu-user, arm64's (test/integration/arm64.test.ts).
test: test-prereqs test-artifacts typecheck
	npx vitest run --project unit
	npx vitest run --project integration

test-unit: node_modules
	npx vitest run --project unit

test-integration: test-prereqs test-artifacts
	npx vitest run --project integration

# What the integration tests run: the executables and the image of both architectures.
test-artifacts: node_modules
	$(MAKE) standalone image ARCH=amd64
	$(MAKE) standalone image ARCH=arm64

# GO_FLANNEL=/path/to/flannel adds flannel's own Go plugin (the full Go chain) to the pod chain bench.
bench: standalone
	node test/bench/run.mjs

clean:
	rm -rf bin dist

# A guided tour for newcomers (root), both demos: test/integration/demo.test.ts runs them.
# demo-bridge: one throwaway namespace attached with bridge + host-local, its
# addresses, routes and a ping, then DEL and cleanup.
# demo-overlay: two nodes in namespaces, vxlan-flannel daemon on each, a pod
# on each through the flannel plugin, a ping across, status and /metrics,
# then everything removed (also when a step fails).
.PHONY: demo demo-bridge demo-overlay
demo: demo-bridge demo-overlay

demo-bridge: build
	bash test/demo/bridge-demo.sh

demo-overlay: build
	bash test/demo/overlay-demo.sh
