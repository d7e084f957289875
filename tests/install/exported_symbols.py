#!/usr/bin/env python3
"""exported_symbols.py LIB INCLUDE_DIR: libstrait.so exports the public API and nothing else.

Every defined dynamic symbol must be strait's: C++ names in namespace strait (functions, vtables,
typeinfo) whose class or function is declared in an installed header (INCLUDE_DIR/strait), or C
API names strait[A-Z]... . So neither strait's internals (the layers are compiled with
-fvisibility=hidden) nor its private dependencies (UCX, liburing, hwloc, xxhash, OpenBLAS, fmt,
spdlog, CUDA, NCCL, libstdc++ template instances) leak, and what a consumer needs is there.
"""
import pathlib
import re
import subprocess
import sys

lib, include_dir = sys.argv[1], pathlib.Path(sys.argv[2]) / "strait"
# Linker-defined section markers, present in every shared library.
LINKER = {"_init", "_fini", "_edata", "_end", "__bss_start"}
# "<kind> for strait::X" forms of the demangler; plain names start with strait:: directly.
SPECIAL = re.compile(r"^(?:typeinfo name for |typeinfo for |vtable for |VTT for |"
                     r"construction vtable for .*-in-|guard variable for |"
                     r"(?:non-)?virtual thunk to )")
NAMESPACES = {"strait", "comm", "kernels", "offload", "sched", "detail"}
# What every consumer needs: if these vanish, STRAIT_API has stopped exporting.
REQUIRED = [
    "strait::comm::Communicator::from_env(strait::comm::CommOptions const&)",
    "strait::comm::Communicator::allreduce(void const*, void*, unsigned long, "
    "strait::kernels::DType, strait::kernels::ReduceOp)",
    "strait::comm::Work::wait() const",
    "typeinfo for strait::Error",
    "typeinfo for strait::comm::Store",
    "strait::offload::PinnedPool::acquire(unsigned long, strait::offload::Placement const&)",
    "strait::sched::make_1f1b(int, int)",
]

# The C API, when its header is installed (strait/strait.h).
C_API = ["straitGetVersion", "straitCommInitFromEnv", "straitAllReduce", "straitCommDestroy"]


def dynamic_symbols(demangle):
    args = ["nm", "-D", "--defined-only"] + (["-C"] if demangle else []) + [lib]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    # "ADDRESS TYPE NAME"; the name may contain spaces once demangled.
    return [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]


def entity(name):
    """The first component after strait's namespaces: the class or function a symbol belongs to."""
    name = SPECIAL.sub("", name)
    name = re.sub(r"\[abi:\w+\]| \[clone [^\]]*\]", "", name)
    depth, parts, cur = 0, [], ""
    for ch in name:
        if ch in "<(":
            if ch == "(" and depth == 0:
                break
            depth += 1
        elif ch in ">)":
            depth -= 1
        if depth == 0 and cur.endswith(":") and ch == ":":
            parts.append(cur[:-1])
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    parts = [re.sub(r"<.*", "", p).strip() for p in parts]
    if not parts or parts[0] != "strait":
        return None
    rest = [p for p in parts[1:] if p not in NAMESPACES]
    return rest[0] if rest else None


def main():
    headers = "\n".join(p.read_text() for p in include_dir.rglob("*.h"))
    mangled, demangled = dynamic_symbols(False), dynamic_symbols(True)
    problems = []
    for raw, name in zip(mangled, demangled):
        if raw in LINKER:
            continue
        if not raw.startswith("_Z"):
            if not re.match(r"^strait[A-Z]\w*$", raw):
                problems.append(f"{raw}: a C symbol outside the C API's strait* prefix")
            elif not re.search(rf"\b{raw}\b", headers):
                problems.append(f"{raw}: declared in no installed header (internal)")
            continue
        what = entity(name)
        if what is None:
            problems.append(f"{name}: not in namespace strait")
        elif not re.search(rf"\b{re.escape(what.lstrip('~'))}\b", headers):
            problems.append(f"{name}: {what} is declared in no installed header (internal)")
    required = REQUIRED + (C_API if (include_dir / "strait.h").exists() else [])
    missing = [r for r in required if r not in demangled]
    for m in missing:
        problems.append(f"{m}: part of the public API but not exported (STRAIT_API missing?)")
    if problems:
        print(f"{lib}: {len(problems)} problems in its {len(mangled)} exported symbols:")
        for p in problems[:60]:
            print("  " + (p if len(p) <= 300 else p[:240] + " ... " + p[-50:]))
        if len(problems) > 60:
            print(f"  ... and {len(problems) - 60} more")
        return 1
    print(f"{lib}: {len(mangled)} exported symbols, all strait's public API")
    return 0


sys.exit(main())
