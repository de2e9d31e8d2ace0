#!/usr/bin/env bash
# Issue 33: the bench's ratios before and after the fast path moved out of the model code into pdevision.fastpath.
# BEFORE is the commit before the move (the kernels inside layers/ and models/), AFTER the commit after it (the
# default pair; HcNet's authors' network landed later, so hcnet_tiny is the same architecture on both sides). The two
# versions cannot share a process, so the same `pdevision bench` command runs in alternating fresh processes,
# before / after / before / after, on the same machine; each run interleaves the models and their peers itself.
#   usage: [ROUNDS=3] benchmarks/archive/fastpath_split/run.sh [BEFORE AFTER]   (from the repository root, after `make install`)
# AFTER defaults to HEAD, the code as it is now.
set -euo pipefail
before=${1:-d2054b5}
after=${2:-$(git rev-parse --short HEAD)}
rounds=${ROUNDS:-3}
here=benchmarks/archive/fastpath_split
old=$(mktemp -d)
new=$(mktemp -d)
trap 'git worktree remove --force "$old"; git worktree remove --force "$new"' EXIT
git worktree add --detach "$old" "$before" >/dev/null
git worktree add --detach "$new" "$after" >/dev/null
args=(bench --models vheat_tiny hcnet_tiny pderesnet50 convnext_tiny swin_tiny_patch4_window7_224 resnet50
      --fused-peers --resolutions 224 1024 --dtype fp32 bf16 --no-operators --train-resolutions --threads 2)
rm -rf $here/before[0-9] $here/after[0-9]
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    out=$here/$side$round
    rm -rf "$out"
    src=$([ "$side" = before ] && echo "$old/src" || echo "$new/src")
    PYTHONPATH=$src .venv/bin/python -m pdevision.cli "${args[@]}" --out "$out"
  done
done
.venv/bin/python -m benchmarks.archive.fastpath_split.summarise
