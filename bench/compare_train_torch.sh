#!/usr/bin/env bash
# The reference transformer on one rank: `strait train` vs the same GPT-2 in PyTorch
# (bench/torch_gpt_train.py, Debian's python3-torch), same shape, same batch, same AdamW, in one run.
#   bench/compare_train_torch.sh                 (4 layers x 128 and 8 layers x 512, 1 and 2 threads)
# For every shape and thread count (strait: --blas-threads T; PyTorch: torch.set_num_threads(T)),
# strait runs STEPS steps of 16 sequences x 128 bytes (4 microbatches of 4) and PyTorch the same
# batch in one piece; both report tokens/s over the steps after the first WARMUP (allocation and
# cache warm-up). Runs alternate (strait first, then PyTorch) so a change in load hits both.
# Output: report.md (printed) and each run's log and JSON in $STRAIT_COMPARE_OUT (default
# $STRAIT_RESULTS_DIR/DATE-train-torch, bench/outdir.sh).
# Environment: STEPS (30), WARMUP (5), THREADS ("1 2"),
# SHAPES ("4x128 8x512", LAYERSxDIM; heads = dim / 32), DATA (the training corpus).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
steps=${STEPS:-30}
warmup=${WARMUP:-5}
threads=${THREADS:-1 2}
shapes=${SHAPES:-4x128 8x512}
data=${DATA:-/usr/share/games/fortunes}
python=/usr/bin/python3
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir train-torch)}
[ -x "$build/strait" ] || "$root/scripts/build.sh"
"$python" -c 'import torch' 2>/dev/null ||
  { echo "compare: $python has no torch (scripts/setup.sh installs python3-torch)" >&2; exit 2; }
[ "$steps" -gt "$warmup" ] || { echo "compare: STEPS must exceed WARMUP" >&2; exit 2; }
mkdir -p "$out"
# A single file for PyTorch: the corpus is a folder of fortune files.
corpus=$out/corpus.txt
if [ -d "$data" ]; then
  find "$data" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z |
    xargs -0 cat >"$corpus"
else
  cp "$data" "$corpus"
fi
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# torch $($python -c 'import torch; print(torch.__version__)'), $steps steps, first $warmup untimed"
  echo
  echo "| shape | threads | strait tokens/s | PyTorch tokens/s | strait / PyTorch |"
  echo "|---|---:|---:|---:|---:|"
} >"$out/report.md"
for shape in $shapes; do
  layers=${shape%x*}
  dim=${shape#*x}
  heads=$(( dim / 32 ))
  for t in $threads; do
    tag=$shape-t$t
    "$build/strait" train --stages 1 --replicas 1 --microbatches 4 --microbatch-size 4 \
      --layers "$layers" --dim "$dim" --heads "$heads" --ctx 128 --steps "$steps" --warmup 2 \
      --blas-threads "$t" --eval-sequences 4 --sample-bytes 0 --data "$corpus" \
      --metrics "$out/strait-$tag.jsonl" >"$out/strait-$tag.log" 2>&1 ||
      { cat "$out/strait-$tag.log" >&2; exit 1; }
    OMP_NUM_THREADS=$t "$python" "$root/bench/torch_gpt_train.py" --threads "$t" \
      --layers "$layers" --dim "$dim" --heads "$heads" --ctx 128 --batch 16 --steps "$steps" \
      --warmup "$warmup" --data "$corpus" --json "$out/torch-$tag.json" >"$out/torch-$tag.log" 2>&1 ||
      { cat "$out/torch-$tag.log" >&2; exit 1; }
    "$python" - "$out/strait-$tag.jsonl" "$out/torch-$tag.json" "$warmup" "$shape" "$t" \
      >>"$out/report.md" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"type": "step"' in l or '"type":"step"' in l]
warm = int(sys.argv[3])
timed = [s for s in steps if s["step"] > warm]
tokens = sum(s["tokens_per_s"] * s["seconds"] for s in timed)
strait = tokens / sum(s["seconds"] for s in timed)
torch = json.load(open(sys.argv[2]))["tokens_per_s"]
print(f"| {sys.argv[4]} | {sys.argv[5]} | {strait:.0f} | {torch:.0f} | {strait / torch:.2f}x |")
PY
  done
done
rm -f "$corpus"
cat "$out/report.md"
