#!/usr/bin/env bash
# The test tools of one recipe, kept outside the checkout so that a fresh
# clone does not link every tool again (about 10 minutes on 2 cores with
# warm Go caches). `make tools` restores bin/ from here before it builds
# and saves it after.
#
#   test/tools/cache.sh restore BIN   copy the tools of this recipe into an empty BIN
#   test/tools/cache.sh save BIN      keep BIN's tools for the next clone
#
# The key is everything that decides what the tools are: the Git blobs of
# Makefile and test/tools/ (pins, wrapper modules, recipes), the Go version
# and the machine. Another recipe is another key; only the newest key is
# kept, so the cache holds one set of tools (about the size of bin/ after
# `make tools`). ROLLGATE_TOOLS_CACHE names the folder (default
# ~/.cache/rollgate/tools); set it to "off" to build every tool.
set -euo pipefail

cmd=${1:?restore or save}
bin=${2:?bin folder}
root=${ROLLGATE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rollgate/tools}
[ "$root" = off ] && exit 0
here=$(cd "$(dirname "$0")/../.." && pwd)
blobs=$(git -C "$here" ls-files -s Makefile test/tools 2>/dev/null) || exit 0 # not a Git checkout: no cache
[ -n "$blobs" ] || exit 0
if ! git -C "$here" diff --quiet HEAD -- Makefile test/tools 2>/dev/null; then
	echo "tools cache: Makefile or test/tools/ has uncommitted changes; not used"
	exit 0
fi
key=$(printf '%s\n%s\n%s\n' "$blobs" "$(go version)" "$(uname -m)" | sha256sum | cut -c1-16)
dir=$root/$key

# What is not a tool: what make build, image, dist and the tests write.
not_tools=(rollgate rollgate-controller rollgate-notifier kubectl-rollgate rollgate-demo rollgate-image.tar image dist
	test.log bench.log bench.rc flaps.log soak.log .tools-built)
excludes=()
for n in "${not_tools[@]}"; do excludes+=(--exclude "./$n"); done

case $cmd in
restore)
	if [ ! -e "$dir/.complete" ]; then
		echo "tools cache: nothing kept for recipe $key yet; building"
		exit 0
	fi
	if [ -d "$bin/.stamps" ]; then
		exit 0 # bin/ has tools of its own: make decides what is stale
	fi
	start=$(date +%s)
	mkdir -p "$bin"
	# -a keeps modification times: the stamps stay older than the tools,
	# so make finds them up to date.
	cp -a "$dir/." "$bin/"
	rm -f "$bin/.complete"
	echo "tools cache: restored recipe $key from $dir in $(($(date +%s) - start)) s ($(du -sh "$bin" | cut -f1))"
	;;
save)
	[ -e "$dir/.complete" ] && exit 0
	[ -d "$bin/.stamps" ] || exit 0
	start=$(date +%s)
	mkdir -p "$root"
	tmp=$(mktemp -d "$root/.saving.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	(cd "$bin" && tar -c --format=posix --anchored "${excludes[@]}" .) | (cd "$tmp" && tar -x)
	touch "$tmp/.complete"
	# One set of tools: the older recipes go.
	find "$root" -mindepth 1 -maxdepth 1 -not -name "$(basename "$tmp")" -exec rm -rf {} +
	mv "$tmp" "$dir"
	trap - EXIT
	echo "tools cache: kept recipe $key in $dir in $(($(date +%s) - start)) s ($(du -sh "$dir" | cut -f1))"
	;;
*)
	echo "usage: $0 restore|save BIN" >&2
	exit 2
	;;
esac
