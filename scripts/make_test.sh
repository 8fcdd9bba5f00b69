#!/usr/bin/env bash
# make test's long parts, one after the other: `make unit`, `make book-strict`, then
# `make site-test` once the site is built. Each part alone keeps CI's two cores busy (on an idle
# 2-core machine: unit 637 CPU-s in 327 s, book-strict 200 in 110 s, site-test 88 in 60 s), so
# running them side by side (the unit tests beside the book build, then the browser test) only
# oversubscribed the cores: in one checkout, one run right after the other, side by side took
# 608 s and 1,205 machine CPU-s, in turn 536 s and 1,008. Every part that failed is named on the
# last lines, and the exit status is 1 if any did. Each part's end is printed in seconds after
# the start ("make test: book-strict ended 469 s after the start"): where a slow run spent it.
#
#   scripts/make_test.sh MAKE   # MAKE: the make to run the parts with ($(MAKE) in the Makefile)
set -uo pipefail
make_=${1:-make}
start=$SECONDS
ended() { echo "make test: $1 ended $((SECONDS - start)) s after the start"; }
# The CPU time of the whole machine (/proc/stat, Linux): what a change must lower, since each
# part keeps both of CI's cores busy. It counts what time(1) misses (Chromium's renderers, which
# it starts outside the test's process tree: the browser test took 46 CPU-s by time(1) and 113
# by /proc/stat, alone on an idle 2-core machine), and other programs.
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat 2> /dev/null; }
busy0=$(busy)
failed=()
part() {  # part NAME: run `make NAME`; a failure is named at the end
    "$make_" --no-print-directory "$1"
    local code=$?
    ended "$1"
    [ "$code" = 0 ] || failed+=("make $1 (exit status $code)")
    return "$code"
}
trap 'exit 130' INT
trap 'exit 143' TERM

part unit
if part book-strict; then
    part site-test
else
    echo "make test: the browser test was not run (the book build failed)"
fi
busy1=$(busy)
if [ -n "$busy0" ] && [ -n "$busy1" ]; then
    echo "make test: the machine's CPUs were busy $(((busy1 - busy0) / $(getconf CLK_TCK))) CPU-s" \
         "over $((SECONDS - start)) s on $(nproc) cores (/proc/stat: every process, other" \
         "programs' too)"
fi
if [ ${#failed[@]} -gt 0 ]; then
    for f in "${failed[@]}"; do echo "FAILED: $f"; done
    exit 1
fi
