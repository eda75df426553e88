#!/usr/bin/env bash
# Counts the test-against-test pairs among the largest pairs `duplicates`
# lists (issue 28): pairs whose two sides are test code, a _test.go file or
# a file under a folder whose name ends in "test" (test/, webhooktest/, ...).
#
# `duplicates` passes over import lines, but not the package paths inside a
# Go `import ( ... )` block: two files that import the same six packages
# make a row, and most of the test-test rows over this tree are such rows.
# They are no repetition to merge, and they push real pairs out of the top
# 200. So the pairs are counted twice:
#
#   as listed      duplicates --most 200 over the tree, as the issue counted
#   beyond imports the same over a copy of the tree whose import blocks are
#                  blanked (line numbers kept), so every row shares code;
#                  split into the rows duplicates marks "boilerplate" (thin
#                  or a shape that recurs across a folder; it lists them
#                  last) and the rest, which is the number the project
#                  keeps under 40
#
#   test/testdups.sh      the counts
#   test/testdups.sh -v   also the test-test rows beyond imports
#
# Needs `duplicates` on the PATH; writes only into a temporary folder.
set -euo pipefail

verbose=0
[ "${1:-}" = -v ] && verbose=1
cd "$(dirname "$0")/.."
command -v duplicates >/dev/null || {
	echo "testdups: no duplicates command on the PATH" >&2
	exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The rows of duplicates over folder $1 whose two sides are test code.
testrows() {
	duplicates --repo "$1" --most 200 --seconds 120 >"$tmp/out"
	if grep '^incomplete:' "$tmp/out" >&2; then
		exit 1
	fi
	awk '/^D[0-9]/ {
		a = $2; b = $4
		if ((a ~ /test\// || a ~ /_test\.go:/) && (b ~ /test\// || b ~ /_test\.go:/)) print
	}' "$tmp/out"
}

# The files duplicates reads in a checkout (tracked, and untracked but not
# ignored), copied with Go import blocks blanked.
mkdir "$tmp/tree"
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
	[ -f "$f" ] && [ ! -L "$f" ] || continue
	mkdir -p "$tmp/tree/$(dirname "$f")"
	case $f in
	*.go) awk '
		/^import \($/ { inblock = 1; print ""; next }
		inblock && /^\)/ { inblock = 0; print ""; next }
		inblock || /^import "/ { print ""; next }
		{ print }' "$f" >"$tmp/tree/$f" ;;
	*) cp "$f" "$tmp/tree/$f" ;;
	esac
done

listed=$(testrows . | wc -l)
testrows "$tmp/tree" >"$tmp/beyond"
thin=$(grep -c 'boilerplate' "$tmp/beyond" || true)
code=$(grep -vc 'boilerplate' "$tmp/beyond" || true)
[ $verbose = 1 ] && cat "$tmp/beyond"
echo "test-test pairs in the top 200, as listed: $listed"
echo "test-test pairs in the top 200 beyond import blocks: $code (and $thin marked boilerplate)"
