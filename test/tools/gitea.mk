# Gitea, the real forge of the forge tests (test/gitea). Included from
# test/tools/tools.mk, which defines TOOLS_BIN, TOOLS_STAMPS and the
# tools-stamp / tools-progress macros.
#
# Gitea's go.mod carries replace lines, which do not apply to a required
# module (`go install ...@version` refuses them). Rather than copy them
# into a wrapper module and keep them in step per version, its module
# source is copied from the module cache into bin/gitea/src and built
# there as the main module, with its own go.mod and go.sum. The copy stays: Gitea is built without `bindata`, so it
# reads its templates, options (licences, .gitignore templates, locales)
# and public assets from that folder at run time (STATIC_ROOT_PATH).
# SQLite is compiled in (cgo, mattn/go-sqlite3), as Gitea's own release
# build does with these tags.

TOOLS_GITEA_VERSION := v1.26.0
TOOLS_GITEA_TAGS := sqlite sqlite_unlock_notify
TOOLS_GITEA_LDFLAGS := -s -w -X main.Version=$(patsubst v%,%,$(TOOLS_GITEA_VERSION)) -X 'main.Tags=$(TOOLS_GITEA_TAGS)'
TOOLS_GITEA_DIR := $(TOOLS_BIN)/gitea

TOOLS_EXTRA += tools-gitea

.PHONY: tools-gitea tools-gitea-clean

tools-gitea: $(TOOLS_GITEA_DIR)/gitea ## Build Gitea (SQLite) into bin/gitea/gitea, with the source it serves its templates from in bin/gitea/src

$(TOOLS_STAMPS)/gitea: .tools-force
	$(call tools-stamp,$@,code.gitea.io/gitea $(TOOLS_GITEA_VERSION) tags $(TOOLS_GITEA_TAGS) $(TOOLS_GITEA_LDFLAGS))

# The module cache is read-only: the copy is made writable, so that
# `make tools-clean` and the next copy can remove it.
$(TOOLS_GITEA_DIR)/src/go.mod: $(TOOLS_STAMPS)/gitea
	@echo "copying the source of code.gitea.io/gitea $(TOOLS_GITEA_VERSION) into $(@D)"
	@mkdir -p $(TOOLS_GITEA_DIR)
	@dir=$$(cd $(TOOLS_GITEA_DIR) && go mod download -json code.gitea.io/gitea@$(TOOLS_GITEA_VERSION) | sed -n 's|^\t"Dir": "\(.*\)",$$|\1|p'); \
		test -f "$$dir/go.mod" || { echo "cannot download code.gitea.io/gitea@$(TOOLS_GITEA_VERSION) from the Go module proxy" >&2; exit 1; }; \
		rm -rf $(@D).tmp && cp -r "$$dir" $(@D).tmp && chmod -R u+w $(@D).tmp
	@rm -rf $(@D) && mv $(@D).tmp $(@D)
	@echo "downloading the modules Gitea needs"
	$(call tools-progress,gitea (downloading its modules),cd $(@D) && go mod download)
	@touch $@

$(TOOLS_GITEA_DIR)/gitea: $(TOOLS_GITEA_DIR)/src/go.mod
	@echo "building gitea $(TOOLS_GITEA_VERSION) (6 min on 2 cores with the Go build cache warm from the other tools, measured; longer from an empty one)"
	$(call tools-progress,gitea,cd $(TOOLS_GITEA_DIR)/src && CGO_ENABLED=1 go build -trimpath -tags '$(TOOLS_GITEA_TAGS)' -ldflags "$(TOOLS_GITEA_LDFLAGS)" -o $@.tmp .)
	@mv -f $@.tmp $@

tools-clean: tools-gitea-clean

tools-gitea-clean:
	rm -rf $(TOOLS_GITEA_DIR) $(TOOLS_STAMPS)/gitea
