# rollgate — make help lists every target.

SHELL := /bin/bash
.DEFAULT_GOAL := help

export GOTOOLCHAIN := local
export GOFLAGS := -buildvcs=false

BIN := $(CURDIR)/bin
CONTROLLER_GEN_VERSION ?= v0.23.0
CONTROLLER_GEN := $(BIN)/controller-gen
CRD_DIR := charts/rollgate/crds
# Packages whose tests need nothing but Go (no control plane, no Git server).
TEST_TIMEOUT ?= 40m
export KUBEBUILDER_ASSETS := $(BIN)/k8s

include test/tools/tools.mk

# Tools that only `make bench` runs (not `make tools`, so a cold `make test`
# does not build them); each file appends its target to TOOLS_BENCH.
TOOLS_BENCH :=
include test/tools/kruiserollout.mk
include test/tools/argorollouts.mk

.PHONY: tools-bench
tools-bench: $(TOOLS_BENCH) ## Build the tools only make bench runs (OpenKruise Rollout and Argo Rollouts for P5)

.PHONY: help
help: ## List every target
	@grep -hE '^[a-zA-Z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | sort | awk 'BEGIN {FS = ":.*## "}; {printf "  %-20s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the CLI into bin/rollgate (and bin/kubectl-rollgate), the controller into bin/rollgate-controller and the notifier into bin/rollgate-notifier
	$(call tools-progress,rollgate,go build -o $(BIN)/rollgate ./cmd/rollgate)
	ln -sf rollgate $(BIN)/kubectl-rollgate
	$(call tools-progress,rollgate-controller,go build -o $(BIN)/rollgate-controller ./cmd/rollgate-controller)
	$(call tools-progress,rollgate-notifier,go build -o $(BIN)/rollgate-notifier ./cmd/rollgate-notifier)

$(CONTROLLER_GEN): $(TOOLS_STAMPS)/controller-gen
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	@touch $@

$(TOOLS_STAMPS)/controller-gen: .tools-force
	$(call tools-stamp,$@,controller-gen $(CONTROLLER_GEN_VERSION))

# The controller image: the static controller binary (cmd/rollgate-controller,
# its entrypoint; the CLI is not in it) and the notifier beside it
# (cmd/rollgate-notifier, the chart's notifications.enabled), Debian's CA bundle, a passwd entry for
# the non-root uid 65532 and OCI labels, FROM scratch, written as a
# docker-save tarball by bin/mkimage (go-containerregistry; no registry, no
# daemon). Times are the commit's, so a commit always gives the same digest.
IMAGE_REPOSITORY ?= ghcr.io/rollgate/rollgate
IMAGE_VERSION ?= $(shell git describe --tags --always 2>/dev/null || echo dev)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_CREATED ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_SOURCE ?= https://github.com/rollgate/rollgate
IMAGE_TAR ?= $(BIN)/rollgate-image.tar

.PHONY: image
image: $(BIN)/mkimage ## Build the controller image into bin/rollgate-image.tar (load: ctr -n k8s.io images import, docker load)
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $(BIN)/image/rollgate-controller ./cmd/rollgate-controller
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $(BIN)/image/rollgate-notifier ./cmd/rollgate-notifier
	$(BIN)/mkimage -binary $(BIN)/image/rollgate-controller -path /rollgate-controller -add /rollgate-notifier=$(BIN)/image/rollgate-notifier -tag $(IMAGE_REPOSITORY):$(IMAGE_VERSION) \
		-user 65532 -ca /etc/ssl/certs/ca-certificates.crt -created $(IMAGE_CREATED) \
		-label org.opencontainers.image.version=$(IMAGE_VERSION) -label org.opencontainers.image.revision=$(IMAGE_REVISION) \
		-label org.opencontainers.image.source=$(IMAGE_SOURCE) -o $(IMAGE_TAR)

# Release artifacts (issue 31), built without a registry or the network
# into DIST_DIR: the controller image as an OCI layout holding a
# linux/amd64 + linux/arm64 image index (bin/mkimage reads each binary's
# architecture from its ELF header), the CLI for linux and darwin on amd64
# and arm64, a krew archive of each and plugin.yaml, a CycloneDX SBOM of
# every binary, SHA256SUMS, and ECDSA P-256 signatures of SHA256SUMS and of
# the image index made with DIST_KEY (generated when missing; pass your own
# PEM key with ROLLGATE_SIGNING_KEY). docs/verify.md verifies them.
# Builds are static and -trimpath, times are the commit's: a commit always
# gives the same image index digest.
DIST_DIR ?= $(BIN)/dist
DIST_KEY ?= $(or $(ROLLGATE_SIGNING_KEY),$(BIN)/dist-signing.key)
DIST_CLI_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST_IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
SOURCE_DATE_EPOCH ?= $(IMAGE_CREATED)

.PHONY: dist
dist: $(BIN)/mkimage ## Build the release artifacts into bin/dist: multi-arch image (OCI layout), CLIs, krew manifest, SBOMs, SHA256SUMS, signatures (docs/verify.md)
	rm -rf $(DIST_DIR) && mkdir -p $(DIST_DIR)
	@set -e; for p in $(DIST_IMAGE_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; for b in rollgate-controller rollgate-notifier; do echo "dist: building $$b $$os/$$arch ($$(date +%T))"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags '-s -w' -o $(DIST_DIR)/$$b-$$os-$$arch ./cmd/$$b; done; done
	@set -e; for p in $(DIST_CLI_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; echo "dist: building rollgate $$os/$$arch ($$(date +%T))"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags '-s -w' -o $(DIST_DIR)/rollgate-$$os-$$arch ./cmd/rollgate; done
	$(BIN)/mkimage -layout $(DIST_DIR)/image $(foreach p,$(DIST_IMAGE_PLATFORMS),-binary $(DIST_DIR)/rollgate-controller-$(subst /,-,$(p)) -add /rollgate-notifier=$(DIST_DIR)/rollgate-notifier-$(subst /,-,$(p))) \
		-path /rollgate-controller -tag $(IMAGE_REPOSITORY):$(IMAGE_VERSION) \
		-user 65532 -ca /etc/ssl/certs/ca-certificates.crt -created $(SOURCE_DATE_EPOCH) \
		-label org.opencontainers.image.version=$(IMAGE_VERSION) -label org.opencontainers.image.revision=$(IMAGE_REVISION) \
		-label org.opencontainers.image.source=$(IMAGE_SOURCE)
	go run ./test/tools/dist -dir $(DIST_DIR) -key $(DIST_KEY) -version $(IMAGE_VERSION) -created $(SOURCE_DATE_EPOCH) -image image \
		$(foreach p,$(DIST_CLI_PLATFORMS),-cli rollgate-$(subst /,-,$(p))) $(foreach p,$(DIST_IMAGE_PLATFORMS),-binary rollgate-controller-$(subst /,-,$(p)) -binary rollgate-notifier-$(subst /,-,$(p)))
	@cd $(DIST_DIR) && echo "dist: $$(cat image-index.digest) in $(DIST_DIR)/image; verify with docs/verify.md" && sha256sum --quiet -c SHA256SUMS

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for api/
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs into charts/rollgate/crds and the API reference docs/api-reference.md
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=$(CRD_DIR)
	go run ./api/apidocs -crds $(CRD_DIR) -out docs/api-reference.md

.PHONY: fmt
fmt: ## Format Go code
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet and check formatting
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

.PHONY: verify
verify: $(CONTROLLER_GEN) ## Fail if generated files are stale, or code is not formatted or vetted
	@sum() { find api $(CRD_DIR) docs/api-reference.md -type f -print0 | sort -z | xargs -0 sha256sum; }; \
	before=$$(sum); $(MAKE) --no-print-directory generate manifests >/dev/null; after=$$(sum); \
	if [ "$$before" != "$$after" ]; then \
		echo "generated files were stale and have been regenerated; review and commit them:"; \
		diff <(echo "$$before") <(echo "$$after") | grep '^[<>]' | awk '{print "  " $$3}' | sort -u; exit 1; fi
	@$(MAKE) --no-print-directory vet

.PHONY: test
test: tools verify build ## Provision tools, verify, and run every test (unit, envtest, kwok e2e, Git, Prometheus)
	@# The longest packages first (e2e ~960 s, realtraffic ~970 s, demo,
	@# walkthrough, argocd): they start first and the short ones fill in
	@# beside them. go test runs as many packages at once as cores; more
	@# (-p 3) was measured 11 min instead of 12-13, but at load 12-15 Flux's
	@# drift detection races the controller's step writes (docs/helm.md).
	@# The whole output is kept in bin/test.log. When a test failed, what
	@# it asserted is printed again at the end, compactly: each failed
	@# test's own file:line messages (not the component logs it dumps), as
	@# a long output is often read from its end.
	@set -o pipefail; go test -count=1 -timeout $(TEST_TIMEOUT) ./test/e2e ./test/realtraffic ./test/demo ./test/walkthrough ./test/argocd ./... 2>&1 | tee $(BIN)/test.log; \
	rc=$$?; if [ $$rc -ne 0 ]; then echo "== failed tests and their messages (whole output: bin/test.log) =="; \
		awk -f test/failures.awk $(BIN)/test.log; \
		echo "== go test exited $$rc"; fi; exit $$rc

.PHONY: check
check: tools-demo tools-k8s-oldest ## The fast loop for every change: vet, gofmt, generated files, and the unit and envtest packages (not the cluster stories under test/)
	@$(MAKE) --no-print-directory verify
	go test -count=1 $$(go list ./... | grep -v '/test/')

.PHONY: test-unit
test-unit: ## Run only the tests that need no external process
	go test -count=1 ./strategy/... ./luascripts/... ./charts/argocd-resource-customizations ./api/...

.PHONY: bench
bench: tools tools-bench ## Run benchmarks and print the numbers (ROLLGATE_BENCH_SCALE=1000 for the P2 row at 1,000 Rollouts; ROLLGATE_P5_SIZES=50,200,500 for P5's fleet sizes)
	@# One package at a time: the cluster benchmarks and the Git ones must not load the machine for each other.
	@# P5 runs rollgate's controller as `make image` builds it (bin/image/rollgate-controller), Kruise Rollout and Argo Rollouts (tools-bench) as processes.
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $(BIN)/image/rollgate-controller ./cmd/rollgate-controller
	@# A benchmark that fails does not stop the others: the summary says which figure it could not measure and why.
	go test -p 1 -timeout 90m -run '^$$' -bench . -benchmem ./... 2>&1 | tee bin/bench.log; echo "rc $${PIPESTATUS[0]}" > bin/bench.rc
	@echo "== P1-P6 (docs/benchmarks.md) =="; grep -E '^P[1-6] ' bin/bench.log || true
	@# Each P-figure against its goal, met or missed, with the commit measured.
	@go run ./test/bench/summary -commit "$$(git rev-parse --short HEAD)$$(git diff --quiet HEAD -- . ':!docs' || echo ', with uncommitted changes')" bin/bench.log
	@test "$$(cat bin/bench.rc)" = "rc 0"
	@# GitOps re-applies across a gate, 60 s per writer (make test runs 20 s)
	ROLLGATE_REAPPLY_SECONDS=60 go test -count=1 -run '^TestGitOpsReapplyNeverFlips' -v ./test/e2e/ > bin/flaps.log 2>&1; \
		rc=$$?; grep -E 'flaps_test.go:[0-9]+:|^(--- |ok|FAIL)' bin/flaps.log; exit $$rc
	ROLLGATE_SOAK_RELEASES=$${ROLLGATE_SOAK_RELEASES:-365} go test -count=1 -timeout 4h -run '^TestSoakReleasesThroughGit$$' -v ./test/e2e/ > bin/soak.log 2>&1; rc=$$?; grep -E 'SOAK|INVARIANT|^(--- |ok|FAIL)' bin/soak.log; exit $$rc

# DEMO_FLAGS go to bin/rollgate-demo, e.g. make demo DEMO_FLAGS=--interactive
DEMO_FLAGS ?=

.PHONY: demo
demo: tools-demo build build-demo ## Run the demo: kwok cluster, local Git server, Flux, a release with an approval merged (DEMO_FLAGS=--interactive)
	$(BIN)/rollgate-demo $(DEMO_FLAGS)

.PHONY: build-demo
build-demo: ## Build the demo into bin/rollgate-demo (a binary of its own: bin/rollgate links no test code)
	$(call tools-progress,rollgate-demo,go build -o $(BIN)/rollgate-demo ./cmd/rollgate-demo)

.PHONY: clean
clean: ## Remove build outputs (keeps the cached tools)
	rm -f $(BIN)/rollgate $(BIN)/kubectl-rollgate $(BIN)/rollgate-demo
