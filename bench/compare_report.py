#!/usr/bin/python3
"""Side-by-side tables of one allreduce comparison (bench/compare_allreduce.sh writes the inputs).

  compare_report.py RANKS STRAIT.json[,STRAIT2.json] GLOO.json[,...] MPI.json[,...] [MEMCPY.json[,...]]

Each argument is a comma-separated list of JSON files of one peer (size ranges run separately);
their rows are merged by size. strait's rows are strait-bench's out-of-place column. Prints each
peer's table, the ratios, and where the issue's bars stand for this rank count:
(a) 2 ranks, 1 MiB - 256 MiB: strait busbw >= 2x Gloo's and >= 2x Open MPI's;
(b) 2 ranks, 8 B - 4 KiB: strait time <= 2x Open MPI's;
(c) 4 ranks: strait faster than both peers at every size;
(d) with MEMCPY (bench/memcpy_bound.py, measured in the same run), 2 ranks, 1 MiB - 256 MiB:
    strait busbw >= 60% of one core's memcpy of the same size.
"""
import json
import sys


def load(paths, strait):
    rows, name = {}, None
    for path in paths.split(","):
        with open(path) as f:
            j = json.load(f)
        name = "strait" if strait else j["peer"]
        for r in j["rows"]:
            if strait:
                m = r["out_of_place"]
                rows[r["bytes"]] = {"bytes": r["bytes"], "count": r["count"], "time_us": m["time_us"],
                                    "algbw_gbs": m["algbw_gbs"], "busbw_gbs": m["busbw_gbs"],
                                    "wrong": m["wrong"]}
            else:
                rows[r["bytes"]] = r
    return name, rows


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def table(name, rows):
    print(f"\n{name}")
    print("| size | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |")
    print("|---:|---:|---:|---:|---:|")
    for b in sorted(rows):
        r = rows[b]
        print(f"| {human(b)} | {r['time_us']:.2f} | {r['algbw_gbs']:.3f} | {r['busbw_gbs']:.3f} |"
              f" {r['wrong']} |")


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    ranks = int(sys.argv[1])
    peers = [load(sys.argv[2], True), load(sys.argv[3], False), load(sys.argv[4], False)]
    for name, rows in peers:
        table(f"{name}, {ranks} ranks", rows)
    (_, s), (gname, g), (mname, m) = peers
    sizes = sorted(set(s) & set(g) & set(m))
    print(f"\nratios, {ranks} ranks (busbw: > 1 means strait is faster; time: < 1 means strait is"
          " faster)")
    print("| size | busbw strait/Gloo | busbw strait/MPI | time strait/Gloo | time strait/MPI |")
    print("|---:|---:|---:|---:|---:|")
    for b in sizes:
        print(f"| {human(b)} | {s[b]['busbw_gbs'] / g[b]['busbw_gbs']:.2f} |"
              f" {s[b]['busbw_gbs'] / m[b]['busbw_gbs']:.2f} |"
              f" {s[b]['time_us'] / g[b]['time_us']:.2f} | {s[b]['time_us'] / m[b]['time_us']:.2f} |")

    def verdict(ok):
        return "met" if ok else "MISSED"

    print()
    if ranks == 2:
        big = [b for b in sizes if (1 << 20) <= b <= (256 << 20)]
        if big:
            worst_g = min(s[b]["busbw_gbs"] / g[b]["busbw_gbs"] for b in big)
            worst_m = min(s[b]["busbw_gbs"] / m[b]["busbw_gbs"] for b in big)
            print(f"bar (a) 1 MiB-256 MiB busbw >= 2x Gloo and >= 2x Open MPI: worst strait/Gloo "
                  f"{worst_g:.2f}, worst strait/MPI {worst_m:.2f}: "
                  f"{verdict(worst_g >= 2 and worst_m >= 2)}")
            for b in big:
                rg, rm = s[b]["busbw_gbs"] / g[b]["busbw_gbs"], s[b]["busbw_gbs"] / m[b]["busbw_gbs"]
                if rg < 2 or rm < 2:
                    print(f"  missed at {human(b)}: strait/Gloo {rg:.2f}, strait/MPI {rm:.2f}")
        small = [b for b in sizes if 8 <= b <= 4096]
        if small:
            worst = max(s[b]["time_us"] / m[b]["time_us"] for b in small)
            print(f"bar (b) 8 B-4 KiB time <= 2x Open MPI's: worst strait/MPI time {worst:.2f}: "
                  f"{verdict(worst <= 2)}")
    if ranks == 4:
        lost = [b for b in sizes if s[b]["time_us"] >= min(g[b]["time_us"], m[b]["time_us"])]
        print(f"bar (c) 4 ranks faster than both peers at every size: {verdict(not lost)}"
              + (f"; slower than a peer at {', '.join(human(b) for b in lost)}" if lost else ""))
    if len(sys.argv) == 6:
        mem = {}
        for path in sys.argv[5].split(","):
            with open(path) as f:
                mem.update({r["bytes"]: r for r in json.load(f)["rows"]})
        both = sorted(set(s) & set(mem))
        print(f"\nstrait busbw against one core's memcpy of the same size, {ranks} ranks")
        print("| size | memcpy (GB/s) | strait busbw (GB/s) | strait/memcpy |")
        print("|---:|---:|---:|---:|")
        for b in both:
            print(f"| {human(b)} | {mem[b]['gbs']:.2f} | {s[b]['busbw_gbs']:.2f} |"
                  f" {s[b]['busbw_gbs'] / mem[b]['gbs']:.2f} |")
        big = [b for b in both if (1 << 20) <= b <= (256 << 20)]
        if ranks == 2 and big:
            worst = min(s[b]["busbw_gbs"] / mem[b]["gbs"] for b in big)
            print(f"\nbar (d) 1 MiB-256 MiB busbw >= 0.6 x memcpy: worst strait/memcpy {worst:.2f}: "
                  f"{verdict(worst >= 0.6)}")
    wrong = sum(r["wrong"] or 0 for _, rows in peers for r in rows.values())
    print(f"wrong elements over all peers and sizes: {wrong}")


if __name__ == "__main__":
    main()
