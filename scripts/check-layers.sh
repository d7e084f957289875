#!/usr/bin/env bash
# Fails (naming file:line) when a project #include points up the layers: core <- kernels <-
# comm, offload <- scheduler <- model <- train <- tools (docs/architecture.md). The faces (capi/)
# sit over comm/; bench/ over everything but tools/; tests/ may include anything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
declare -A allowed=(
  [core]="core"
  [kernels]="core kernels"
  [comm]="core kernels comm"
  [offload]="core kernels offload"
  [scheduler]="core kernels comm offload scheduler"
  [model]="core kernels comm offload scheduler model"
  [train]="core kernels comm offload scheduler model train"
  [capi]="core kernels comm offload capi"
  [tools]="core kernels comm offload scheduler model train capi tools"
  [bench]="core kernels comm offload scheduler model train capi bench"
)
bad=0
checked=0
while IFS= read -r file; do
  layer=${file%%/*}
  [ -n "${allowed[$layer]:-}" ] || continue
  checked=$((checked + 1))
  while IFS=: read -r line target; do
    dir=${target%%/*}
    [ "$dir" = "$target" ] && continue  # a header beside it, or a generated one
    [ -d "$dir" ] || continue           # not a folder of the project (e.g. strait/strait.h)
    case " ${allowed[$layer]} " in
      *" $dir "*) ;;
      *) echo "$file:$line: $layer/ includes $target ($dir/ is above it)" >&2; bad=1 ;;
    esac
  done < <(grep -n -o -E '^#include "[^"]+"' "$file" | sed -E 's/^([0-9]+):#include "([^"]+)"/\1:\2/')
done < <(git ls-files '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh' '*.c')
if [ "$bad" -ne 0 ]; then
  echo "includes that point up the layers (move the code down, or pass what it needs in)" >&2
  exit 1
fi
echo "$checked files include only their own layer and those below it"
