# Prints each failed test of a `go test` output with its own file:line messages
# (the first 2 and the last 8 when there are more), without the component
# logs a failed story dumps: `make test` ends with it, since a long output
# is often read from its end.
function flush(   i, from) { if (!on) return; from = (n > 10) ? n - 7 : 1; if (n > 10) { print m[1]; print m[2]; print "        [" (n - 10) " more lines in bin/test.log]" } for (i = from; i <= n; i++) print m[i]; on = 0 }
/^ *--- FAIL/ { flush(); print; n = 0; on = 1; next }
/^ *--- (PASS|SKIP)|^=== |^(ok|FAIL)[ \t]/ { flush() }
/^panic:/ { print substr($0, 1, 300); next }
on && /^ +[A-Za-z0-9_]+\.go:[0-9]+: / { m[++n] = substr($0, 1, 300) }
END { flush() }
