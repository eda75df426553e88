# Test tools for the real-cluster test platform (see /work/shared/TESTING.md).
#
# Included from the top-level Makefile; it can also be used alone:
#   make -f test/tools/tools.mk tools
#
# Every tool lands in the git-ignored bin/ folder. A stamp file under
# bin/.stamps/ holds the pinned version of each tool; it is rewritten only when
# the pin changes, so a target rebuilds only when its tool is missing or its
# pin moved. Nothing here downloads from outside the Go module proxy and the
# Debian archive.

# Pinned versions. The Kubernetes and etcd versions are read from their wrapper
# modules, so test/tools/kbins/go.mod and test/tools/etcdbin/go.mod are the
# only places to change them.
TOOLS_KUBE_VERSION := $(shell sed -n 's|^require k8s.io/kubernetes \(v[^ ]*\)$$|\1|p' $(dir $(lastword $(MAKEFILE_LIST)))kbins/go.mod)
TOOLS_ETCD_VERSION := $(shell sed -n 's|^require go.etcd.io/etcd/server/v3 \(v[^ ]*\)$$|\1|p' $(dir $(lastword $(MAKEFILE_LIST)))etcdbin/go.mod)
# The Flux controllers (source-controller and kustomize-controller for the
# demo, notification-controller for event forwarding) are pinned in their
# wrapper module, test/tools/flux/go.mod; the stamp also carries a digest of
# that go.mod, so a changed replace line rebuilds them.
TOOLS_FLUX_SOURCE_VERSION := $(shell sed -n 's|^\tgithub.com/fluxcd/source-controller \(v[^ ]*\)$$|\1|p' $(dir $(lastword $(MAKEFILE_LIST)))flux/go.mod)
TOOLS_FLUX_KUSTOMIZE_VERSION := $(shell sed -n 's|^\tgithub.com/fluxcd/kustomize-controller \(v[^ ]*\)$$|\1|p' $(dir $(lastword $(MAKEFILE_LIST)))flux/go.mod)
TOOLS_FLUX_NOTIFICATION_VERSION := $(shell sed -n 's|^\tgithub.com/fluxcd/notification-controller \(v[^ ]*\)$$|\1|p' $(dir $(lastword $(MAKEFILE_LIST)))flux/go.mod)
TOOLS_FLUX_GOMOD_DIGEST := $(firstword $(shell sha256sum $(dir $(lastword $(MAKEFILE_LIST)))flux/go.mod))
TOOLS_KWOK_VERSION := v0.8.0
TOOLS_HELM_VERSION := v3.22.0
# Debian package (its version follows the distribution: bookworm has 2.42).
# etcd is built from source instead of Debian's etcd-server 3.4.23, which is
# too old for kube-apiserver 1.36 (see test/tools/etcdbin/main.go).
TOOLS_PROMETHEUS_PACKAGE := prometheus
TOOLS_PROMETHEUS_SYSTEM_BINARY := /usr/bin/prometheus

TOOLS_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
# Tools with a file of their own add their targets to TOOLS_EXTRA (see the
# includes at the end of this file).
TOOLS_EXTRA :=
TOOLS_ROOT := $(abspath $(TOOLS_DIR)/../..)
TOOLS_BIN := $(TOOLS_ROOT)/bin
TOOLS_K8S_BIN := $(TOOLS_BIN)/k8s
TOOLS_STAMPS := $(TOOLS_BIN)/.stamps
TOOLS_FLUX_BIN := $(TOOLS_BIN)/flux
TOOLS_FLUX_COMPONENTS := source-controller kustomize-controller notification-controller
# What `make demo` runs (test/demo), and nothing more: the control plane that
# kwok starts, and Flux's source- and kustomize-controller. Not kubectl, helm,
# Prometheus, notification-controller or the previous release's controller.
TOOLS_DEMO_K8S_COMPONENTS := kube-apiserver kube-controller-manager kube-scheduler
TOOLS_DEMO_FLUX_COMPONENTS := source-controller kustomize-controller
TOOLS_SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

TOOLS_K8S_COMPONENTS := kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
TOOLS_KUBE_MINOR := $(word 2,$(subst ., ,$(TOOLS_KUBE_VERSION)))
# The same version stamping the Kubernetes release build does, so the binaries
# report v1.x.y (kwokctl picks component flags from `--version`, and clients
# see a real server version) instead of v0.0.0-master.
TOOLS_K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(TOOLS_KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(TOOLS_KUBE_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=$(TOOLS_KUBE_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=$(TOOLS_KUBE_MINOR) \
	-X k8s.io/client-go/pkg/version.gitTreeState=clean
TOOLS_HELM_LDFLAGS := -s -w \
	-X helm.sh/helm/v3/internal/version.version=$(TOOLS_HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(TOOLS_KUBE_MINOR) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(TOOLS_KUBE_MINOR)

# tools-stamp writes $(2) to the stamp file $(1) only when it differs, so the
# stamp's modification time moves only when a pin changes.
define tools-stamp
	@mkdir -p $(dir $(1))
	@if [ "$$(cat $(1) 2>/dev/null)" != "$(2)" ]; then echo "$(2)" > $(1); fi
endef

# tools-apt installs Debian package $(2) unless $(1) exists (as root, or
# through sudo), leaving none of its services running or enabled
# (test/tools/apt-install.sh).
define tools-apt
	@if [ ! -x $(1) ]; then \
		echo "installing $(2) (apt; its services are neither started nor enabled)"; \
		$(TOOLS_SUDO) $(TOOLS_DIR)/apt-install.sh $(2); \
	fi
	@test -x $(1) || { echo "$(1) is still missing after installing $(2)" >&2; exit 1; }
endef

# tools-progress runs the shell command $(2), printing "still building $(1)"
# with the elapsed time every 30 s, so a long build is never silent.
define tools-progress
	@start=$$(date +%s); ( while sleep 30; do echo "  ... still building $(1) ($$(( $$(date +%s) - start )) s)"; done ) & ticker=$$!; \
	$(2); rc=$$?; kill $$ticker 2>/dev/null; wait $$ticker 2>/dev/null; \
	echo "  $(1): $$(( $$(date +%s) - start )) s (exit $$rc)"; \
	mkdir -p $(BIN); echo "$$(( $$(date +%s) - start )) s  $(1) (exit $$rc)" >> $(BIN)/.tools-built; exit $$rc
endef

# Tools kept in files of their own (included before `tools` reads
# TOOLS_EXTRA); each appends its target to TOOLS_EXTRA.
-include $(TOOLS_DIR)/argocd.mk $(TOOLS_DIR)/helmcontroller.mk $(TOOLS_DIR)/gitea.mk $(TOOLS_DIR)/k8soldest.mk

.PHONY: tools-image tools-traefik tools-realnode tools tools-build tools-demo tools-k8s tools-etcd tools-kwok tools-helm tools-prometheus tools-chromium tools-flux tools-previous tools-clean .tools-force
.tools-force:

tools: ## Install or build every test tool into bin/ (cheap when up to date; a fresh clone copies them from the tools cache, test/tools/cache.sh)
	@$(TOOLS_DIR)/cache.sh restore $(TOOLS_BIN)
	@$(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) tools-build
	@$(TOOLS_DIR)/cache.sh save $(TOOLS_BIN)

tools-build: tools-demo tools-k8s tools-etcd tools-kwok tools-helm tools-prometheus tools-chromium tools-flux tools-previous tools-image tools-traefik tools-realnode $(TOOLS_EXTRA) ## Build every test tool into bin/ without the tools cache
	@# What this run built, longest first (nothing when every tool was up to date).
	@if [ -s $(BIN)/.tools-built ]; then echo "== tools built by this run, longest first =="; sort -rn $(BIN)/.tools-built; \
		awk '{ s += $$1 } END { print "  total " s " s of builds (some ran in parallel under make -j)" }' $(BIN)/.tools-built; fi; rm -f $(BIN)/.tools-built

tools-demo: $(addprefix $(TOOLS_K8S_BIN)/,$(TOOLS_DEMO_K8S_COMPONENTS)) tools-etcd tools-kwok $(addprefix $(TOOLS_FLUX_BIN)/,$(TOOLS_DEMO_FLUX_COMPONENTS)) $(TOOLS_FLUX_BIN)/crds ## Build only what make demo runs: kube-apiserver, -controller-manager, -scheduler, etcd, kwok, Flux source- and kustomize-controller

tools-k8s: $(addprefix $(TOOLS_K8S_BIN)/,$(TOOLS_K8S_COMPONENTS)) ## Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet and kube-proxy into bin/k8s/

tools-etcd: $(TOOLS_K8S_BIN)/etcd ## Build etcd (the version Kubernetes uses) into bin/k8s/

tools-kwok: $(TOOLS_BIN)/kwok $(TOOLS_BIN)/kwokctl ## Build kwok and kwokctl into bin/

tools-helm: $(TOOLS_BIN)/helm ## Build helm into bin/

tools-prometheus: $(TOOLS_BIN)/prometheus ## Install Prometheus (Debian) and link it as bin/prometheus

# Debian's Chromium draws `rollgate dashboard` headless in test/e2e
# TestDashboardInABrowser (97 s to install on a fresh machine, measured
# 2026-11-29).
tools-chromium: ## Install Chromium (Debian) for the dashboard's browser test
	$(call tools-apt,/usr/bin/chromium,chromium)

tools-flux: $(addprefix $(TOOLS_FLUX_BIN)/,$(TOOLS_FLUX_COMPONENTS)) $(TOOLS_FLUX_BIN)/crds ## Build Flux source-, kustomize- and notification-controller into bin/flux/, with their CRDs in bin/flux/crds/

tools-clean: ## Remove every tool from bin/ (the next `make tools` rebuilds them)
	rm -rf $(TOOLS_K8S_BIN) $(TOOLS_FLUX_BIN) $(TOOLS_STAMPS) $(TOOLS_BIN)/previous $(addprefix $(TOOLS_BIN)/,kwok kwokctl helm prometheus traefik gateway-api-crds traefik-crds mkimage k8s-oldest)

$(TOOLS_STAMPS)/k8s: .tools-force
	$(call tools-stamp,$@,k8s.io/kubernetes $(TOOLS_KUBE_VERSION) $(TOOLS_K8S_LDFLAGS))

$(TOOLS_STAMPS)/etcd: .tools-force
	$(call tools-stamp,$@,go.etcd.io/etcd/server/v3 $(TOOLS_ETCD_VERSION))

$(TOOLS_STAMPS)/flux: .tools-force
	$(call tools-stamp,$@,fluxcd source-controller $(TOOLS_FLUX_SOURCE_VERSION) kustomize-controller $(TOOLS_FLUX_KUSTOMIZE_VERSION) notification-controller $(TOOLS_FLUX_NOTIFICATION_VERSION) go.mod $(TOOLS_FLUX_GOMOD_DIGEST))

$(TOOLS_STAMPS)/kwok: .tools-force
	$(call tools-stamp,$@,sigs.k8s.io/kwok $(TOOLS_KWOK_VERSION))

$(TOOLS_STAMPS)/helm: .tools-force
	$(call tools-stamp,$@,helm.sh/helm/v3 $(TOOLS_HELM_VERSION) $(TOOLS_HELM_LDFLAGS))

$(TOOLS_K8S_BIN)/%: $(TOOLS_STAMPS)/k8s
	@test -n "$(TOOLS_KUBE_VERSION)" || { echo "cannot read the k8s.io/kubernetes pin from test/tools/kbins/go.mod" >&2; exit 1; }
	@echo "building $* $(TOOLS_KUBE_VERSION)"
	$(call tools-progress,$*,cd $(TOOLS_DIR)/kbins && go build -ldflags '$(TOOLS_K8S_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/$*)
	@mv -f $@.tmp $@

# The controllers build from one wrapper module (test/tools/flux), whose
# replace lines are the controllers' own: a required module's replace lines do
# not apply, so `go install ...@version` cannot build them.
$(addprefix $(TOOLS_FLUX_BIN)/,$(TOOLS_FLUX_COMPONENTS)): $(TOOLS_FLUX_BIN)/%: $(TOOLS_STAMPS)/flux
	@test -n "$(TOOLS_FLUX_SOURCE_VERSION)" -a -n "$(TOOLS_FLUX_KUSTOMIZE_VERSION)" -a -n "$(TOOLS_FLUX_NOTIFICATION_VERSION)" || { echo "cannot read the Flux pins from test/tools/flux/go.mod" >&2; exit 1; }
	@echo "building $*"
	@mkdir -p $(@D)
	$(call tools-progress,$*,cd $(TOOLS_DIR)/flux && go build -ldflags '-s -w' -o $@.tmp github.com/fluxcd/$*)
	@mv -f $@.tmp $@

# The CRDs ship in each controller's module (config/crd/bases); copy them
# from the module cache, replacing the folder as a whole.
$(TOOLS_FLUX_BIN)/crds: $(TOOLS_STAMPS)/flux
	@echo "copying the Flux CRDs into $@"
	@rm -rf $@.tmp && mkdir -p $@.tmp
	@set -e; for m in $(TOOLS_FLUX_COMPONENTS); do \
		dir=$$(cd $(TOOLS_DIR)/flux && go mod download -json github.com/fluxcd/$$m | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		test -d "$$dir/config/crd/bases" || { echo "no CRDs in github.com/fluxcd/$$m ($$dir)" >&2; exit 1; }; \
		install -m 0644 "$$dir"/config/crd/bases/*.yaml $@.tmp/; \
	done
	@rm -rf $@ && mv $@.tmp $@ && touch $@

# Both binaries come from one module at one version: one `go install` (a
# grouped target). `go install` leaves an up-to-date binary untouched, hence the
# touch.
$(TOOLS_BIN)/kwok $(TOOLS_BIN)/kwokctl &: $(TOOLS_STAMPS)/kwok
	@echo "building kwok and kwokctl $(TOOLS_KWOK_VERSION)"
	$(call tools-progress,kwok and kwokctl,GOBIN=$(TOOLS_BIN) go install sigs.k8s.io/kwok/cmd/kwok@$(TOOLS_KWOK_VERSION) sigs.k8s.io/kwok/cmd/kwokctl@$(TOOLS_KWOK_VERSION))
	@touch $(TOOLS_BIN)/kwok $(TOOLS_BIN)/kwokctl

$(TOOLS_BIN)/helm: $(TOOLS_STAMPS)/helm
	@echo "building helm $(TOOLS_HELM_VERSION)"
	$(call tools-progress,helm,GOBIN=$(TOOLS_BIN) go install -ldflags '$(TOOLS_HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(TOOLS_HELM_VERSION))
	@touch $@

$(TOOLS_K8S_BIN)/etcd: $(TOOLS_STAMPS)/etcd
	@test -n "$(TOOLS_ETCD_VERSION)" || { echo "cannot read the etcd pin from test/tools/etcdbin/go.mod" >&2; exit 1; }
	@echo "building etcd $(TOOLS_ETCD_VERSION)"
	$(call tools-progress,etcd,cd $(TOOLS_DIR)/etcdbin && go build -ldflags '-s -w' -o $@.tmp .)
	@mv -f $@.tmp $@

# Traefik, the Gateway API data plane of test/realtraffic, from its wrapper
# module (Traefik's replace lines copied into test/tools/traefik/go.mod).
TOOLS_TRAEFIK_VERSION := $(shell sed -n 's|^require github.com/traefik/traefik/v3 \(v[^ ]*\)$$|\1|p' $(dir $(lastword $(MAKEFILE_LIST)))traefik/go.mod)

tools-traefik: $(TOOLS_BIN)/traefik $(TOOLS_BIN)/gateway-api-crds $(TOOLS_BIN)/traefik-crds ## Build Traefik (data plane of the real-traffic tests) into bin/, with its Gateway API CRDs in bin/gateway-api-crds/ and its own CRDs in bin/traefik-crds/

# The standard-channel Gateway API CRDs of the version Traefik is built
# with (v1.4.0), from the module cache.
$(TOOLS_BIN)/gateway-api-crds: $(TOOLS_STAMPS)/traefik
	@echo "copying the Gateway API CRDs Traefik uses into $@"
	@rm -rf $@.tmp && mkdir -p $@.tmp
	@dir=$$(cd $(TOOLS_DIR)/traefik && go mod download -json sigs.k8s.io/gateway-api | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		test -d "$$dir/config/crd/standard" || { echo "no CRDs in sigs.k8s.io/gateway-api ($$dir)" >&2; exit 1; }; \
		install -m 0644 "$$dir"/config/crd/standard/*.yaml $@.tmp/
	@rm -rf $@ && mv $@.tmp $@ && touch $@

# Traefik's own CRDs (IngressRoute, TraefikService, Middleware, ...) of the
# version built, from the module cache: the resources its Kubernetes CRD
# provider reads, which rollgate shifts through Lua scripts.
$(TOOLS_BIN)/traefik-crds: $(TOOLS_STAMPS)/traefik
	@echo "copying Traefik's CRDs into $@"
	@rm -rf $@.tmp && mkdir -p $@.tmp
	@dir=$$(cd $(TOOLS_DIR)/traefik && go mod download -json github.com/traefik/traefik/v3 | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		f="$$dir/docs/content/reference/dynamic-configuration/kubernetes-crd-definition-v1.yml"; \
		test -f "$$f" || { echo "no CRD definitions in github.com/traefik/traefik/v3 ($$f)" >&2; exit 1; }; \
		install -m 0644 "$$f" $@.tmp/traefik-crds.yaml
	@rm -rf $@ && mv $@.tmp $@ && touch $@

$(TOOLS_STAMPS)/traefik: .tools-force
	$(call tools-stamp,$@,github.com/traefik/traefik/v3 $(TOOLS_TRAEFIK_VERSION))

$(TOOLS_BIN)/traefik: $(TOOLS_STAMPS)/traefik
	@test -n "$(TOOLS_TRAEFIK_VERSION)" || { echo "cannot read the Traefik pin from test/tools/traefik/go.mod" >&2; exit 1; }
	@echo "building traefik $(TOOLS_TRAEFIK_VERSION) (10-20 min on 2 cold cores)"
	$(call tools-progress,traefik,cd $(TOOLS_DIR)/traefik && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$(TOOLS_TRAEFIK_VERSION)' -o $@.tmp github.com/traefik/traefik/v3/cmd/traefik)
	@mv -f $@.tmp $@

# The real node's runtime and network (test/realnode) from Debian. The real
# node runs its own containerd with its own socket; apt-install.sh leaves
# the packages' services (containerd, nftables) neither started nor enabled.
TOOLS_REALNODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack nftables

tools-realnode: ## Install containerd, runc, the CNI plugins, iptables, nftables and conntrack (Debian) for the real node
	@missing=; for b in /usr/bin/containerd /usr/bin/ctr /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap /usr/sbin/iptables /usr/sbin/conntrack /usr/sbin/nft; do \
		test -x $$b || missing=1; done; \
	if [ -n "$$missing" ]; then \
		echo "installing $(TOOLS_REALNODE_PACKAGES) (apt; their services are neither started nor enabled)"; \
		$(TOOLS_SUDO) $(TOOLS_DIR)/apt-install.sh $(TOOLS_REALNODE_PACKAGES); \
	fi
	@for b in /usr/bin/containerd /usr/bin/ctr /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap /usr/sbin/iptables /usr/sbin/conntrack /usr/sbin/nft; do \
		test -x $$b || { echo "$$b is still missing after installing $(TOOLS_REALNODE_PACKAGES)" >&2; exit 1; }; done

# The image builder (go-containerregistry, its own module so the controller's
# go.mod does not carry it): `make image` and test/realnode build container
# images with it, without a registry or a daemon.
tools-image: $(TOOLS_BIN)/mkimage ## Build the container image builder into bin/mkimage

$(TOOLS_BIN)/mkimage: $(TOOLS_DIR)/image/main.go $(TOOLS_DIR)/image/go.mod
	@echo "building mkimage"
	cd $(TOOLS_DIR)/image && CGO_ENABLED=0 go build -trimpath -o $@.tmp .
	@mv -f $@.tmp $@

$(TOOLS_BIN)/prometheus:
	$(call tools-apt,$(TOOLS_PROMETHEUS_SYSTEM_BINARY),$(TOOLS_PROMETHEUS_PACKAGE))
	@mkdir -p $(@D)
	ln -sfn $(TOOLS_PROMETHEUS_SYSTEM_BINARY) $@

# The controller of the previous release, for the chart upgrade test
# (test/chart/upgrade_test.go runs the previous chart with the previous
# controller, then upgrades both in the middle of a release). Its source is
# the release's own, archived next to its chart in test/chart/testdata/previous
# (docs/development.md, "Releasing the chart", says how to refresh both).
TOOLS_PREVIOUS_DIR := $(TOOLS_ROOT)/test/chart/testdata/previous
TOOLS_PREVIOUS_SRC := $(wildcard $(TOOLS_PREVIOUS_DIR)/controller-*-src.tar.gz)
TOOLS_PREVIOUS_BINS := $(patsubst controller-%-src.tar.gz,$(TOOLS_BIN)/previous/rollgate-%,$(notdir $(TOOLS_PREVIOUS_SRC)))

tools-previous: $(TOOLS_PREVIOUS_BINS) ## Build the previous release's controller into bin/previous/ (chart upgrade test)

$(TOOLS_BIN)/previous/rollgate-%: $(TOOLS_PREVIOUS_DIR)/controller-%-src.tar.gz
	@echo "building the rollgate $* controller from $(notdir $<)"
	@rm -rf $@.src && mkdir -p $@.src && tar -xzf $< -C $@.src --strip-components=1
	$(call tools-progress,the rollgate $* controller,cd $@.src && go build -o $@.tmp ./cmd/rollgate)
	@mv -f $@.tmp $@ && rm -rf $@.src

