"""Summarise a ``py-spy record --format raw`` profile per process: inclusive samples by frame.

    py-spy record --subprocesses --rate 50 --format raw -o run.raw -- \\
        .venv/bin/python -m benchmarks.cluster_overhead DATA_DIR
    .venv/bin/python -m benchmarks.pyspy_summary run.raw [--match evalcore] [--top 25]

Each line of a raw profile is a stack (frames separated by ``;``, outermost first, the
``process PID:"command"`` frames included with ``--subprocesses``) and its sample count.
This prints, for every process, its samples and the frames (matching ``--match``, a regular
expression) with the most samples inclusive of their callees. py-spy is not a dependency
of evalcore: ``pip install py-spy`` (docs/performance.md, "Profiles").
"""

from __future__ import annotations

import argparse
import collections
import re


def summarise(path: str, match: str | None, top: int) -> str:
    pattern = re.compile(match) if match else None
    per_process: collections.Counter = collections.Counter()
    inclusive: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with open(path, encoding="utf-8") as lines:
        pending = ""
        for line in lines:
            # A process's command line may hold a newline (py-spy writes it as it is), so a
            # stack runs on until a line ends in its sample count.
            stack, _, count = (pending + line.rstrip("\n")).rpartition(" ")
            if not count.isdigit():
                pending += line
                continue
            pending = ""
            if not stack:
                continue
            n = int(count)
            frames = stack.split(";")
            processes = [f for f in frames if f.startswith("process ")]
            process = processes[-1][:80] if processes else "(main)"
            per_process[process] += n
            seen = set()
            for frame in frames:
                if frame.startswith("process ") or frame in seen:
                    continue
                seen.add(frame)
                if pattern is None or pattern.search(frame):
                    inclusive[process][frame] += n
    out = []
    for process, total in per_process.most_common():
        out.append(f"== {process}: {total} samples")
        for frame, n in inclusive[process].most_common(top):
            out.append(f"  {n:7d} {100 * n / total:5.1f} %  {frame[:140]}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pyspy_summary", description=__doc__.splitlines()[0])
    parser.add_argument("raw", help="a py-spy raw profile")
    parser.add_argument("--match", default="evalcore", help="regular expression the frames must match (default: evalcore)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print(summarise(args.raw, args.match, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
