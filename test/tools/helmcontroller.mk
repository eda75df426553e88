# Flux helm-controller, for the HelmRelease stories (test/helmrelease).
#
# Included from test/tools/tools.mk, which defines TOOLS_DIR, TOOLS_STAMPS,
# TOOLS_FLUX_BIN and the tools-stamp / tools-progress macros. The controller
# builds from its own wrapper module, test/tools/helmcontroller (Helm v4 and
# controller-runtime v0.24 would move the pins of test/tools/flux); its
# version is read from that go.mod, the only place to change it. The binary
# lands next to the other Flux controllers, bin/flux/helm-controller, and its
# CRD (HelmRelease) in bin/helmcontroller/crds/, so that the folder
# bin/flux/crds of `make tools-flux` stays as it is.

TOOLS_HELMCONTROLLER_VERSION := $(shell sed -n 's|^require github.com/fluxcd/helm-controller \(v[^ ]*\)$$|\1|p' $(TOOLS_DIR)/helmcontroller/go.mod)
TOOLS_HELMCONTROLLER_GOMOD_DIGEST := $(firstword $(shell sha256sum $(TOOLS_DIR)/helmcontroller/go.mod))
TOOLS_HELMCONTROLLER_CRDS := $(TOOLS_BIN)/helmcontroller/crds

TOOLS_EXTRA += tools-helmcontroller

.PHONY: tools-helmcontroller

tools-helmcontroller: $(TOOLS_FLUX_BIN)/helm-controller $(TOOLS_HELMCONTROLLER_CRDS) ## Build Flux helm-controller into bin/flux/, with its HelmRelease CRD in bin/helmcontroller/crds/

$(TOOLS_STAMPS)/helmcontroller: .tools-force
	$(call tools-stamp,$@,fluxcd helm-controller $(TOOLS_HELMCONTROLLER_VERSION) go.mod $(TOOLS_HELMCONTROLLER_GOMOD_DIGEST))

$(TOOLS_FLUX_BIN)/helm-controller: $(TOOLS_STAMPS)/helmcontroller
	@test -n "$(TOOLS_HELMCONTROLLER_VERSION)" || { echo "cannot read the helm-controller pin from test/tools/helmcontroller/go.mod" >&2; exit 1; }
	@echo "building helm-controller $(TOOLS_HELMCONTROLLER_VERSION) (3 min cold on 2 cores at load 7-9, measured)"
	@mkdir -p $(@D)
	$(call tools-progress,helm-controller,cd $(TOOLS_DIR)/helmcontroller && go build -ldflags '-s -w' -o $@.tmp github.com/fluxcd/helm-controller)
	@mv -f $@.tmp $@

# The CRD ships in the module (config/crd/bases); copied from the module
# cache, replacing the folder as a whole.
$(TOOLS_HELMCONTROLLER_CRDS): $(TOOLS_STAMPS)/helmcontroller
	@echo "copying the helm-controller CRD into $@"
	@rm -rf $@.tmp && mkdir -p $@.tmp
	@dir=$$(cd $(TOOLS_DIR)/helmcontroller && go mod download -json github.com/fluxcd/helm-controller | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		test -d "$$dir/config/crd/bases" || { echo "no CRDs in github.com/fluxcd/helm-controller ($$dir)" >&2; exit 1; }; \
		install -m 0644 "$$dir"/config/crd/bases/*.yaml $@.tmp/
	@rm -rf $@ && mv $@.tmp $@ && touch $@

tools-clean: tools-helmcontroller-clean

.PHONY: tools-helmcontroller-clean
tools-helmcontroller-clean:
	rm -rf $(TOOLS_BIN)/helmcontroller
