# The kube-apiserver of the oldest Kubernetes minor rollgate promises
# (docs/install.md), built from its own wrapper module
# (test/tools/kbins-oldest, whose replace lines pin the staging modules at
# the release's version) into bin/k8s-oldest/, beside a link to the etcd of
# bin/k8s/. The API tests (api/v1alpha1, api/admission) run their CRD
# schemas, CEL rules and matchConditions against it as well as against the
# current one. Included from test/tools/tools.mk.

TOOLS_KUBE_OLDEST_VERSION := $(shell sed -n 's|^require k8s.io/kubernetes \(v[^ ]*\)$$|\1|p' $(TOOLS_DIR)/kbins-oldest/go.mod)
TOOLS_KUBE_OLDEST_MINOR := $(word 2,$(subst ., ,$(TOOLS_KUBE_OLDEST_VERSION)))
TOOLS_K8S_OLDEST_BIN := $(TOOLS_BIN)/k8s-oldest
TOOLS_K8S_OLDEST_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(TOOLS_KUBE_OLDEST_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(TOOLS_KUBE_OLDEST_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean

TOOLS_EXTRA += tools-k8s-oldest

.PHONY: tools-k8s-oldest

tools-k8s-oldest: $(TOOLS_K8S_OLDEST_BIN)/kube-apiserver $(TOOLS_K8S_OLDEST_BIN)/etcd ## Build the kube-apiserver of the oldest Kubernetes promised into bin/k8s-oldest/ (the API tests run against it too)

$(TOOLS_STAMPS)/k8s-oldest: .tools-force
	$(call tools-stamp,$@,k8s.io/kubernetes $(TOOLS_KUBE_OLDEST_VERSION) $(TOOLS_K8S_OLDEST_LDFLAGS))

$(TOOLS_K8S_OLDEST_BIN)/kube-apiserver: $(TOOLS_STAMPS)/k8s-oldest
	@test -n "$(TOOLS_KUBE_OLDEST_VERSION)" || { echo "cannot read the k8s.io/kubernetes pin from test/tools/kbins-oldest/go.mod" >&2; exit 1; }
	@echo "building kube-apiserver $(TOOLS_KUBE_OLDEST_VERSION), the oldest Kubernetes promised"
	@mkdir -p $(@D)
	$(call tools-progress,kube-apiserver $(TOOLS_KUBE_OLDEST_VERSION),cd $(TOOLS_DIR)/kbins-oldest && go build -ldflags '$(TOOLS_K8S_OLDEST_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver)
	@mv -f $@.tmp $@

$(TOOLS_K8S_OLDEST_BIN)/etcd: $(TOOLS_K8S_BIN)/etcd
	@mkdir -p $(@D)
	@ln -sf ../k8s/etcd $@
