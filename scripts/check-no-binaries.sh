#!/usr/bin/env bash
# Fails (listing the files) when a tracked file is a compiled program or library (ELF: executables,
# shared objects, object files) or a static archive. Build outputs belong in the build folder
# (ignored), never in the tree; run data goes to results/ (ignored too, scripts/check-tree-size.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# perl (perl-base is in every Debian system) reads the first bytes of each file in one process.
found=$(git ls-files -z | perl -0 -ne '
  chomp; next unless -f $_;
  open(my $f, "<:raw", $_) or next; read($f, my $magic, 8); close($f);
  print "  $_ (ELF)\n" if $magic =~ /^\x7fELF/;
  print "  $_ (ar archive)\n" if $magic =~ /^!<arch>\n/;')
if [ -n "$found" ]; then
  printf 'compiled files are committed (git rm them; build outputs go to build/):\n%s\n' "$found" >&2
  exit 1
fi
echo "$(git ls-files | wc -l) tracked files, none compiled"
