#!/usr/bin/env bash
# make test's long parts, side by side: `make unit` in the foreground; `make book-strict`, then
# `make site-test` once the site is built, in the background. Each leaves a core idle at times
# (the unit tests' last file on one worker, the book's one-threaded Sphinx pass, kernels and ranks
# starting), which the other fills. The background part's output is held in a log and shown
# after the unit tests, so the two never interleave; every part that failed is named on the last
# lines, and the exit status is 1 if any did. Each part's end is printed in seconds after the
# start ("make test: book-strict ended 251 s after the start"): which part a slow run waited on.
#
#   scripts/side_by_side.sh MAKE   # MAKE: the make to run the parts with ($(MAKE) in the Makefile)
set -uo pipefail
make_=${1:-make}
log=$(mktemp)
status=$(mktemp)
# Job control: the background part gets a process group of its own, which an interrupt or an
# early exit stops whole (jupyter-book, its kernels and their ranks); without it a shell runs its
# background jobs with SIGINT ignored.
set -m
start=$SECONDS
ended() { echo "make test: $1 ended $((SECONDS - start)) s after the start"; }
# The CPU time of the whole machine (/proc/stat, Linux): the parts keep both of CI's cores busy,
# so this, not any part's wall time, is what a change must lower. It counts what time(1) misses
# (Chromium's renderers, which it starts outside the test's process tree: the browser test took
# 46 CPU-s by time(1) and 113 by /proc/stat, alone on an idle 2-core machine), and other programs.
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat 2> /dev/null; }
busy0=$(busy)
{
    "$make_" --no-print-directory book-strict
    book=$?
    echo "book-strict $book" > "$status"
    ended book-strict
    if [ "$book" = 0 ]; then
        "$make_" --no-print-directory site-test
        echo "site-test $?" >> "$status"
        ended site-test
    fi
} > "$log" 2>&1 &
bg=$!
set +m
trap 'kill -- -$bg 2> /dev/null; rm -f "$log" "$status"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$make_" --no-print-directory unit
unit=$?
ended unit
if kill -0 "$bg" 2> /dev/null; then
    echo "make test: the unit tests are done; waiting for the book build (and the browser test)"
fi
wait "$bg"
cat "$log"
busy1=$(busy)
if [ -n "$busy0" ] && [ -n "$busy1" ]; then
    echo "make test: the machine's CPUs were busy $(((busy1 - busy0) / $(getconf CLK_TCK))) CPU-s" \
         "over $((SECONDS - start)) s on $(nproc) cores (/proc/stat: every process, other" \
         "programs' too)"
fi
failed=()
[ "$unit" = 0 ] || failed+=("make unit (exit status $unit)")
while read -r part code; do
    [ "$code" = 0 ] || failed+=("make $part (exit status $code)")
done < "$status"
if ! grep -q '^book-strict ' "$status"; then
    failed+=("make book-strict (it did not finish)")
elif ! grep -q '^site-test ' "$status"; then
    echo "make test: the browser test was not run (the book build failed)"
fi
if [ ${#failed[@]} -gt 0 ]; then
    for f in "${failed[@]}"; do echo "FAILED: $f"; done
    exit 1
fi
