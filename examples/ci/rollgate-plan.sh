#!/bin/sh
# rollgate plan as a pull-request check, for any CI: run it in a checkout of
# the pull request with the base branch fetched (git fetch origin main).
# It validates every rollgate object under PATHS as the API server would,
# says which Rollouts the pull request releases, and what each step of
# their release does, as Markdown to post as a pull-request comment.
#
#   BASE   the base of the pull request (default origin/main)
#   PATHS  files or folders holding the manifests (default .)
#   OUT    where the Markdown goes (default rollgate-plan.md)
#
# Exit status: 0, or 6 when an object would be refused by the API server
# (the comment names the field), 1 when the files cannot be read.
set -eu
BASE=${BASE:-origin/main}
PATHS=${PATHS:-.}
OUT=${OUT:-rollgate-plan.md}
status=0
# shellcheck disable=SC2086 # PATHS may name several folders
rollgate plan --base "$BASE" -o markdown $PATHS >"$OUT" || status=$?
cat "$OUT"
exit "$status"
