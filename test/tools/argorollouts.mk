# Argo Rollouts, for the side-by-side benchmark (test/bench,
# BenchmarkSideBySide, P5 of docs/benchmarks.md). Included from the
# Makefile after test/tools/tools.mk, which defines TOOLS_DIR, TOOLS_STAMPS
# and the tools-stamp / tools-progress macros.
#
# Only `make bench` builds it (through tools-bench): it is not part of
# `make tools`, so a cold `make test` does not grow. The controller
# (cmd/rollouts-controller) builds from the wrapper module
# test/tools/argorollouts, whose go.mod pins the version, into
# bin/argorollouts/rollouts-controller; its CRDs are copied from the module
# source in the Go module cache (manifests/crds) into bin/argorollouts/crds/.
#
# Argo Rollouts v1.10.2 needs Go >= 1.26.10. rollgate keeps its own Go
# (GOTOOLCHAIN=local, exported by the Makefile): only the commands of this
# wrapper module run with GOTOOLCHAIN=$(TOOLS_ARGOROLLOUTS_GO), which the go
# command fetches once from the module proxy (about 76 MB) into the module
# cache.

TOOLS_ARGOROLLOUTS_VERSION := $(shell sed -n 's|^require github.com/argoproj/argo-rollouts \(v[^ ]*\)$$|\1|p' $(TOOLS_DIR)/argorollouts/go.mod)
TOOLS_ARGOROLLOUTS_GOMOD_DIGEST := $(firstword $(shell sha256sum $(TOOLS_DIR)/argorollouts/go.mod))
TOOLS_ARGOROLLOUTS_GO := go1.27.3
TOOLS_ARGOROLLOUTS_BIN := $(TOOLS_BIN)/argorollouts
# Built as `make image` builds rollgate's controller (static, stripped), so
# the side-by-side benchmark compares binaries built the same way.
TOOLS_ARGOROLLOUTS_BUILD := CGO_ENABLED=0 go build -trimpath -ldflags '-s -w'

TOOLS_BENCH += tools-argorollouts

.PHONY: tools-argorollouts tools-argorollouts-clean

tools-argorollouts: $(TOOLS_ARGOROLLOUTS_BIN)/rollouts-controller $(TOOLS_ARGOROLLOUTS_BIN)/crds ## Build Argo Rollouts (make bench only) into bin/argorollouts/, with its CRDs in bin/argorollouts/crds/

$(TOOLS_STAMPS)/argorollouts: .tools-force
	$(call tools-stamp,$@,github.com/argoproj/argo-rollouts $(TOOLS_ARGOROLLOUTS_VERSION) go.mod $(TOOLS_ARGOROLLOUTS_GOMOD_DIGEST) $(TOOLS_ARGOROLLOUTS_GO) $(TOOLS_ARGOROLLOUTS_BUILD))

$(TOOLS_ARGOROLLOUTS_BIN)/rollouts-controller: $(TOOLS_STAMPS)/argorollouts
	@test -n "$(TOOLS_ARGOROLLOUTS_VERSION)" || { echo "cannot read the Argo Rollouts pin from test/tools/argorollouts/go.mod" >&2; exit 1; }
	@echo "building argo-rollouts $(TOOLS_ARGOROLLOUTS_VERSION) with $(TOOLS_ARGOROLLOUTS_GO) (fetched once from the module proxy)"
	@mkdir -p $(@D)
	$(call tools-progress,rollouts-controller,cd $(TOOLS_DIR)/argorollouts && GOTOOLCHAIN=$(TOOLS_ARGOROLLOUTS_GO) $(TOOLS_ARGOROLLOUTS_BUILD) -o $@.tmp github.com/argoproj/argo-rollouts/cmd/rollouts-controller)
	@mv -f $@.tmp $@

# The CRDs (Rollout, AnalysisRun, AnalysisTemplate,
# ClusterAnalysisTemplate, Experiment) from the module's own source in the
# module cache, replacing the folder as a whole.
$(TOOLS_ARGOROLLOUTS_BIN)/crds: $(TOOLS_STAMPS)/argorollouts
	@echo "copying the Argo Rollouts CRDs into $@"
	@rm -rf $@.tmp && mkdir -p $@.tmp
	@dir=$$(cd $(TOOLS_DIR)/argorollouts && export GOTOOLCHAIN=$(TOOLS_ARGOROLLOUTS_GO) && go mod download github.com/argoproj/argo-rollouts && go list -m -json github.com/argoproj/argo-rollouts | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		test -d "$$dir/manifests/crds" || { echo "no CRDs in github.com/argoproj/argo-rollouts ($$dir)" >&2; exit 1; }; \
		install -m 0644 "$$dir"/manifests/crds/*-crd.yaml $@.tmp/
	@rm -rf $@ && mv $@.tmp $@ && touch $@

tools-clean: tools-argorollouts-clean

tools-argorollouts-clean:
	rm -rf $(TOOLS_ARGOROLLOUTS_BIN)
