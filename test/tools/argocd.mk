# Argo CD for the Argo CD tests (test/argocd and the walkthrough of
# docs/getting-started-argocd.md). Included from test/tools/tools.mk.
#
# Argo CD is one binary whose role (application-controller, repo-server,
# server, or the argocd CLI) follows its name or ARGOCD_BINARY_NAME; it is
# built from the wrapper module test/tools/argocd, whose go.mod pins the
# version and carries Argo CD's replace block. The CRDs travel with it, from
# the module's manifests/crds, and the kustomize its repo-server runs is
# built next to it. Redis, which Argo CD caches in, comes from
# Debian. The stamp carries the version and a digest of the wrapper's go.mod,
# so a changed replace line rebuilds it.

TOOLS_ARGOCD_VERSION := $(shell sed -n 's|^require github.com/argoproj/argo-cd/v3 \(v[^ ]*\)$$|\1|p' $(TOOLS_DIR)/argocd/go.mod)
TOOLS_ARGOCD_GOMOD_DIGEST := $(firstword $(shell sha256sum $(TOOLS_DIR)/argocd/go.mod))
TOOLS_ARGOCD_BIN := $(TOOLS_BIN)/argocd
TOOLS_ARGOCD_LDFLAGS := -s -w -X github.com/argoproj/argo-cd/v3/common.version=$(patsubst v%,%,$(TOOLS_ARGOCD_VERSION))
# The kustomize Argo CD's image bundles (hack/tool-versions.sh of v3.2.11):
# the repo-server runs it for every folder with a kustomization.yaml.
TOOLS_ARGOCD_KUSTOMIZE_VERSION := v5.7.0
TOOLS_REDIS_PACKAGE := redis-server
TOOLS_REDIS_SYSTEM_BINARY := /usr/bin/redis-server

TOOLS_EXTRA += tools-argocd

.PHONY: tools-argocd

tools-argocd: $(TOOLS_ARGOCD_BIN)/argocd $(TOOLS_ARGOCD_BIN)/kustomize $(TOOLS_ARGOCD_BIN)/crds $(TOOLS_BIN)/redis-server ## Build Argo CD and the kustomize it runs into bin/argocd/ (CRDs in bin/argocd/crds/) and install Redis (Debian) as bin/redis-server

$(TOOLS_STAMPS)/argocd: .tools-force
	$(call tools-stamp,$@,github.com/argoproj/argo-cd/v3 $(TOOLS_ARGOCD_VERSION) go.mod $(TOOLS_ARGOCD_GOMOD_DIGEST) $(TOOLS_ARGOCD_LDFLAGS))

$(TOOLS_ARGOCD_BIN)/argocd: $(TOOLS_STAMPS)/argocd
	@test -n "$(TOOLS_ARGOCD_VERSION)" || { echo "cannot read the Argo CD pin from test/tools/argocd/go.mod" >&2; exit 1; }
	@echo "building argocd $(TOOLS_ARGOCD_VERSION) (10-16 min on 2 cold cores)"
	@mkdir -p $(@D)
	$(call tools-progress,argocd,cd $(TOOLS_DIR)/argocd && go build -trimpath -ldflags '$(TOOLS_ARGOCD_LDFLAGS)' -o $@.tmp github.com/argoproj/argo-cd/v3/cmd)
	@mv -f $@.tmp $@

$(TOOLS_STAMPS)/argocd-kustomize: .tools-force
	$(call tools-stamp,$@,sigs.k8s.io/kustomize/kustomize/v5 $(TOOLS_ARGOCD_KUSTOMIZE_VERSION))

$(TOOLS_ARGOCD_BIN)/kustomize: $(TOOLS_STAMPS)/argocd-kustomize
	@echo "building kustomize $(TOOLS_ARGOCD_KUSTOMIZE_VERSION) for Argo CD's repo-server"
	@mkdir -p $(@D)
	$(call tools-progress,kustomize,GOBIN=$(@D) go install -ldflags '-s -w' sigs.k8s.io/kustomize/kustomize/v5@$(TOOLS_ARGOCD_KUSTOMIZE_VERSION))
	@touch $@

# The CRDs (Application, ApplicationSet, AppProject) from the module cache,
# replacing the folder as a whole.
$(TOOLS_ARGOCD_BIN)/crds: $(TOOLS_STAMPS)/argocd
	@echo "copying the Argo CD CRDs into $@"
	@rm -rf $@.tmp && mkdir -p $@.tmp
	@dir=$$(cd $(TOOLS_DIR)/argocd && go mod download -json github.com/argoproj/argo-cd/v3 | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		test -d "$$dir/manifests/crds" || { echo "no CRDs in github.com/argoproj/argo-cd/v3 ($$dir)" >&2; exit 1; }; \
		install -m 0644 "$$dir"/manifests/crds/*-crd.yaml $@.tmp/
	@rm -rf $@ && mv $@.tmp $@ && touch $@

$(TOOLS_BIN)/redis-server:
	$(call tools-apt,$(TOOLS_REDIS_SYSTEM_BINARY),$(TOOLS_REDIS_PACKAGE))
	@mkdir -p $(@D)
	ln -sfn $(TOOLS_REDIS_SYSTEM_BINARY) $@
