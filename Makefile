# Build, install and test the CNI plugins.
DESTDIR ?=
CNI_BIN_DIR ?= /opt/cni/bin
PLUGINS := host-local bridge vxlan-flannel

.PHONY: all build install test test-unit test-integration typecheck bench clean

all: build

node_modules: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch node_modules

build: node_modules
	node build.mjs $(PLUGINS)

install: build
	install -d -m 0755 $(DESTDIR)$(CNI_BIN_DIR)
	install -m 0755 $(addprefix bin/,$(PLUGINS)) $(DESTDIR)$(CNI_BIN_DIR)/

typecheck: node_modules
	npx tsc --noEmit -p .

# The whole suite: type check, unit tests, then the integration tests, which
# need root (network namespaces, the Go reference plugins from Debian).
test: build typecheck
	npx vitest run --project unit
	npx vitest run --project integration

test-unit: node_modules
	npx vitest run --project unit

test-integration: build
	npx vitest run --project integration

bench: build
	node test/bench/run.mjs

clean:
	rm -rf bin

# A guided tour for newcomers (root): one throwaway namespace attached with
# bridge + host-local, its addresses, routes and a ping, then DEL and cleanup.
.PHONY: demo
demo: build
	bash test/demo/bridge-demo.sh
