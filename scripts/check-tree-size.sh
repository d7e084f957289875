#!/usr/bin/env bash
# Fails (naming the files) when a tracked file is larger than 256 KiB outside the tests' fixtures
# (tests/**/fixtures/, tests/fuzz/seeds/), or when anything is tracked under bench/results/.
# Run data belongs in a results folder outside the tree (bench/outdir.sh; results/ is ignored) and
# plots are redrawn from it (bench/plots.sh); the repository keeps sources, docs, small fixtures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
limit=$((256 * 1024))
# perl (perl-base is in every Debian system) stats every file in one process.
found=$(git ls-files -z | perl -0 -ne '
  chomp;
  if (m{^bench/results/}) { print "  $_ (run data: bench/results/ left the tree)\n"; next; }
  next if m{^tests/(.+/)?fixtures/} || m{^tests/fuzz/seeds/};
  my $size = -s $_;
  print "  $_ ($size bytes)\n" if defined $size && -f _ && $size > '"$limit"';')
if [ -n "$found" ]; then
  printf 'tracked files over %d bytes, or under bench/results/ (run data goes to results/,\n' "$limit" >&2
  printf 'outside the tree; a test reads a small fixture under tests/):\n%s\n' "$found" >&2
  exit 1
fi
echo "$(git ls-files | wc -l) tracked files: none over $limit bytes outside test fixtures," \
  "none under bench/results/"
