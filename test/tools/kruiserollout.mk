# OpenKruise Rollout, for the side-by-side benchmark (test/bench,
# BenchmarkSideBySide, P5 of docs/benchmarks.md). Included from
# test/tools/tools.mk, which defines TOOLS_DIR, TOOLS_STAMPS and the
# tools-stamp / tools-progress macros.
#
# Only `make bench` builds it (through tools-bench, below): it is not part of
# `make tools`, so a cold `make test` does not grow. The controller (one
# binary: the Rollout, BatchRelease, TrafficRouting and advanced-Deployment
# controllers and its admission webhook) builds from the wrapper module
# test/tools/kruiserollout, whose go.mod pins the version, into
# bin/kruiserollout/kruise-rollout; its CRDs are copied from the module
# source in the Go module cache (config/crd/bases) into
# bin/kruiserollout/crds/. The stamp carries the version and a digest of the
# wrapper's go.mod, so a changed pin rebuilds both.

TOOLS_KRUISEROLLOUT_VERSION := $(shell sed -n 's|^require github.com/openkruise/rollouts \(v[^ ]*\)$$|\1|p' $(TOOLS_DIR)/kruiserollout/go.mod)
TOOLS_KRUISEROLLOUT_GOMOD_DIGEST := $(firstword $(shell sha256sum $(TOOLS_DIR)/kruiserollout/go.mod))
TOOLS_KRUISEROLLOUT_BIN := $(TOOLS_BIN)/kruiserollout
# Built as `make image` builds rollgate's controller (static, stripped), so
# the side-by-side benchmark compares two binaries built the same way.
TOOLS_KRUISEROLLOUT_BUILD := CGO_ENABLED=0 go build -trimpath -ldflags '-s -w'

TOOLS_BENCH += tools-kruiserollout

.PHONY: tools-kruiserollout tools-kruiserollout-clean

tools-kruiserollout: $(TOOLS_KRUISEROLLOUT_BIN)/kruise-rollout $(TOOLS_KRUISEROLLOUT_BIN)/crds ## Build OpenKruise Rollout (make bench only) into bin/kruiserollout/, with its CRDs in bin/kruiserollout/crds/

$(TOOLS_STAMPS)/kruiserollout: .tools-force
	$(call tools-stamp,$@,github.com/openkruise/rollouts $(TOOLS_KRUISEROLLOUT_VERSION) go.mod $(TOOLS_KRUISEROLLOUT_GOMOD_DIGEST) $(TOOLS_KRUISEROLLOUT_BUILD))

$(TOOLS_KRUISEROLLOUT_BIN)/kruise-rollout: $(TOOLS_STAMPS)/kruiserollout
	@test -n "$(TOOLS_KRUISEROLLOUT_VERSION)" || { echo "cannot read the Kruise Rollout pin from test/tools/kruiserollout/go.mod" >&2; exit 1; }
	@echo "building kruise-rollout $(TOOLS_KRUISEROLLOUT_VERSION)"
	@mkdir -p $(@D)
	$(call tools-progress,kruise-rollout,cd $(TOOLS_DIR)/kruiserollout && $(TOOLS_KRUISEROLLOUT_BUILD) -o $@.tmp github.com/openkruise/rollouts)
	@mv -f $@.tmp $@

# The CRDs (Rollout, BatchRelease, TrafficRouting, RolloutHistory) from the
# module's own source in the module cache, replacing the folder as a whole,
# with the admission webhook configurations and their objectSelector patch
# (config/webhook) in crds/webhook/ and the patches that turn on the
# conversion webhook of two CRDs (config/crd/patches) in crds/patches/: the
# controller refuses to start unless both webhook configurations exist, and
# rewrites them (and the CRDs' conversion webhook) to itself. Its Lua
# scripts (lua_configuration, which its image holds in its working
# directory and the controller reads from ./lua_configuration: the Ingress
# dialects such as nginx) go to crds/lua_configuration/, the working
# directory the benchmark starts it in; only the .lua files (a .go file
# there would be a package of rollgate's module without its imports).
$(TOOLS_KRUISEROLLOUT_BIN)/crds: $(TOOLS_STAMPS)/kruiserollout
	@echo "copying the Kruise Rollout CRDs into $@"
	@rm -rf $@.tmp && mkdir -p $@.tmp
	@dir=$$(cd $(TOOLS_DIR)/kruiserollout && go mod download github.com/openkruise/rollouts && go list -m -json github.com/openkruise/rollouts | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		test -d "$$dir/config/crd/bases" || { echo "no CRDs in github.com/openkruise/rollouts ($$dir)" >&2; exit 1; }; \
		install -m 0644 "$$dir"/config/crd/bases/*.yaml $@.tmp/ && \
		install -m 0644 -D -t $@.tmp/webhook "$$dir"/config/webhook/manifests.yaml "$$dir"/config/webhook/patch_manifests.yaml && \
		install -m 0644 -D -t $@.tmp/patches "$$dir"/config/crd/patches/webhook_in_*.yaml && \
		(cd "$$dir" && find lua_configuration -name '*.lua') | while read -r f; do install -m 0644 -D "$$dir/$$f" "$@.tmp/$$f" || exit 1; done
	@rm -rf $@ && mv $@.tmp $@ && touch $@

tools-clean: tools-kruiserollout-clean

tools-kruiserollout-clean:
	rm -rf $(TOOLS_KRUISEROLLOUT_BIN)
