#!/usr/bin/env bash
# tools/gpu_stamp.sh — run here before a tools/gpu_run.sh call: writes .carry/STAMP (the commit checked out
# and the hash of the working tree as it is, uncommitted changes included), which the call carries with
# .carry. gpu_run.sh hashes the tree it was given the same way and logs the commit only when the hashes
# agree: the device's copy of the repository is the working tree over some other checkout, so its own
# `git rev-parse HEAD` does not name the code that runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/tree_hash.sh
mkdir -p .carry
commit="$(git rev-parse --short HEAD)"
tree="$(tree_hash)"
dirty=""
[[ -n "$(git status --porcelain)" ]] && dirty="+uncommitted"
echo "$commit$dirty $tree" > .carry/STAMP
echo "[gpu_stamp] $commit$dirty, tree $tree"
