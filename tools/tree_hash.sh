# tools/tree_hash.sh — sourced by gpu_stamp.sh and gpu_run.sh: tree_hash prints the git tree hash of the
# working tree as it is (tracked and untracked files that git does not ignore), through a throwaway index.
tree_hash() {
  local index
  index="$(mktemp)"
  rm -f "$index"
  GIT_INDEX_FILE="$index" git add -A . > /dev/null 2>&1 && GIT_INDEX_FILE="$index" git write-tree 2>/dev/null ||
    echo unknown
  rm -f "$index"
}
