#!/bin/sh
# docs/capi.md's programs, as a reader copies them: the page's BLOCK-th ```c block (default 1) is
# extracted, compiled as C99 with the strictest warnings against <strait/strait.h> and
# libstrait.so, and run on 2 ranks under `strait run`. The program checks its own result, so a
# wrong sum fails the test.
# Usage: doc_example_test.sh PAGE CC INCLUDE_DIR LIBSTRAIT STRAIT WORK_DIR [BLOCK]
set -eu
page=$1 cc=$2 include_dir=$3 libstrait=$4 strait=$5 work=$6 block=${7:-1}
mkdir -p "$work"
source_file=$work/capi_example_$block.c
awk -v want="$block" '/^```c[ ]*$/ { n++; if (n == want) { on = 1; next } } /^```[ ]*$/ { on = 0 } on' \
  "$page" > "$source_file"
if [ ! -s "$source_file" ]; then
  echo "doc_example_test: no \`\`\`c block number $block in $page" >&2
  exit 1
fi
"$cc" -std=c99 -Wall -Wextra -Werror -pedantic -I"$include_dir" "$source_file" "$libstrait" \
  -Wl,-rpath,"$(dirname "$libstrait")" -o "$work/capi_example_$block"
exec "$strait" run -n 2 -- "$work/capi_example_$block"
