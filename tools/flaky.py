"""Rerun the baked projects' tests that depend on processes and signals, several times, with the CPU kept busy.

A test that interrupts a run or starts several processes can pass on a quiet machine and fail on a loaded one. This
bakes the four projects `make test` runs whole (each task in each layout), then runs each one's tests marked
`machinery` (and `-m` as given) `--rounds` times, with pytest-xdist's two workers and, beside them, `--hogs` busy
processes that keep the cores taken the whole time. Every failure is listed by round and test id; the table goes to
stdout and to `--out` (benchmark-results/flaky.md by default). Exit status 1 if any test failed once.

    make flaky                                    # 5 rounds, 2 hogs, the machinery tests of the four bakes; then
                                                  # their comparisons of two runs' numbers as another CPU compiles them
    .venv/bin/python tools/flaky.py --rounds 3 --only default --marker "machinery or slow"
    .venv/bin/python tools/flaky.py --rounds 1 --hogs 0 --marker compares --xla-flags=--xla_cpu_max_isa=AVX2

`--xla-flags` runs the tests with those XLA flags (the bake's tests add their own beside them): with
`--xla_cpu_max_isa=AVX2` XLA:CPU generates the code a CPU without AVX-512 runs, so two programs' numbers round as on
such a machine (docs/tests.md, "Numbers compared between runs").

Not part of `make test` (it takes about as long, times the rounds): run it on a change to the loop's machinery, to a
launcher, or to a test that waits for a run.
"""

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.baking import bake_into, suite_env  # noqa: E402  (the template's own helpers: a script, not a package)
from tests.test_generated_project import WHOLE  # noqa: E402  (the bakes make test runs whole)

FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def hog(stop) -> None:
    """A busy loop until `stop` is set: one core taken."""
    while not stop.is_set():
        sum(range(10_000))


def run_round(project: Path, marker: str, workers: int, xla_flags: str = "") -> tuple[float, str, list[str]]:
    """One pytest run of `project`'s tests selected by `marker` (with `xla_flags` in XLA_FLAGS): (seconds, summary
    line, failed test ids)."""
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marker, "-rfE", "tests"]
    if workers > 1:
        command += ["-n", str(workers)]
    flags = {"XLA_FLAGS": xla_flags} if xla_flags else {}
    result = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=3600,
                            env=suite_env(PJRT_DEVICE="CPU", REQUIRE_XLA="1", HF_HUB_OFFLINE="1", **flags))
    lines = result.stdout.strip().splitlines()
    summary = lines[-1] if lines else f"no output (exit status {result.returncode})"
    failed = FAILED.findall(result.stdout)
    if result.returncode not in (0, 5) and not failed:  # 5: nothing selected in this bake
        failed = [f"(the run itself, exit status {result.returncode})"]
    return time.monotonic() - started, summary, failed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the tests (0: none)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers per run")
    parser.add_argument("--marker", default="machinery", help="pytest -m expression of the tests to rerun")
    parser.add_argument("--only", choices=sorted(WHOLE), action="append", help="these bakes only (default: all four)")
    parser.add_argument("--xla-flags", default="", help="XLA_FLAGS for the tests, e.g. --xla_cpu_max_isa=AVX2")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmark-results" / "flaky.md")
    args = parser.parse_args(argv)
    names = args.only or list(WHOLE)

    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=hog, args=(stop,), daemon=True) for _ in range(args.hogs)]
    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="flaky-") as folder:
        projects = {name: bake_into(Path(folder) / name, **WHOLE[name]) for name in names}
        for process in hogs:
            process.start()
        try:
            for round_number in range(1, args.rounds + 1):
                for name, project in projects.items():
                    seconds, summary, failed = run_round(project, args.marker, args.workers, args.xla_flags)
                    rows.append(f"| {round_number} | {name} | {seconds:.0f} | {summary} |")
                    failures += [f"- round {round_number}, {name}: {test}" for test in failed]
                    print(rows[-1], *failures[-len(failed):] if failed else [], sep="\n", flush=True)
        finally:
            stop.set()
            for process in hogs:
                process.join()
    table = "\n".join([
        f"# Reruns under load ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores)", "",
        f"`-m \"{args.marker}\"`, {args.rounds} rounds, pytest-xdist with {args.workers} workers, {args.hogs} busy "
        "processes beside them" + (f", XLA_FLAGS={args.xla_flags}" if args.xla_flags else "") + " (tools/flaky.py).",
        "",
        "| round | bake | s | pytest's summary |", "|---|---|---|---|", *rows, "",
        "Failures:" if failures else "No test failed.", *failures, ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    print(f"\n{len(failures)} failure(s); the table is in {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
