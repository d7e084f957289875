#!/usr/bin/env python3
"""Fails, naming them, on a library source file over 800 lines or a function over 120 lines.

Library sources are the tracked C++/CUDA files outside the tests (tests/, capi/tests/,
python/tests/). A function is found as clang-format lays it out: a line ending in `{` that closes
a parameter list, and the first later line holding only `}` at the same indentation; lambdas and
local classes count inside the function that holds them.
"""
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120
TESTS = re.compile(r"^(tests/|capi/tests/|python/tests/)")
OPENER = re.compile(r"^(\s*)(?!(if|for|while|switch|catch|else|do|return|case)\b)\S.*\)"
                    r"(\s*(const|noexcept|override|final|mutable|->\s*[\w:<>&*, ]+))*\s*\{$")
CONTROL = re.compile(r"^\s*(\}\s*)?(if|for|while|switch|catch|else|do)\b")


def functions(lines):
    """Yields (first line, line count) of each outermost function body found."""
    i = 0
    while i < len(lines):
        m = OPENER.match(lines[i])
        if m and not CONTROL.match(lines[i]) and "=" not in lines[i].split("(")[0]:
            start = i
            # the signature may begin on earlier lines: walk back over a wrapped parameter list and
            # a constructor's member initialisers (lines that begin with ':' or ',')
            while start > 0 and (re.search(r"[,(]$", lines[start - 1].rstrip())
                                 or re.match(r"\s*[:,]", lines[start])):
                start -= 1
            indent = re.match(r"\s*", lines[start]).group(0)
            for j in range(i + 1, len(lines)):
                if lines[j].rstrip() in (indent + "}", indent + "};"):
                    yield start + 1, j - start + 1
                    i = j
                    break
        i += 1


def main():
    files = subprocess.run(["git", "ls-files", "*.h", "*.hpp", "*.cpp", "*.cc", "*.cu", "*.cuh"],
                           capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for path in files:
        if TESTS.match(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if len(lines) - 1 > MAX_FILE_LINES:
            bad.append(f"{path}: {len(lines) - 1} lines (at most {MAX_FILE_LINES}: split it by "
                       "responsibility)")
        for first, count in functions(lines):
            if count > MAX_FUNCTION_LINES:
                bad.append(f"{path}:{first}: a function of {count} lines (at most "
                           f"{MAX_FUNCTION_LINES})")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    print(f"{len(files)} sources: no library file over {MAX_FILE_LINES} lines, no function over "
          f"{MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
