"""Where `make test`'s time goes: one table from the JUnit XML files each pytest run of it wrote.

`make test` writes benchmark-results/durations/top-level.xml for its own session, and tests/baking.py one file per
baked suite it runs (default.xml, fsdp.xml, causal-lm.xml, ...), the benchmark profiles included. A test's time is
pytest's own: setup, call and teardown, so a module fixture's training run counts in the first test that uses it.
Usage: python tools/durations.py [benchmark-results/durations] > benchmark-results/durations.md (make test does it).
"""

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOWEST = 25  # tests listed one by one, slowest first


def suites(folder: Path) -> dict:
    """{suite name: (wall seconds, [(seconds, test id)])} from every JUnit file in `folder`."""
    found = {}
    for path in sorted(folder.glob("*.xml")):
        root = ElementTree.parse(path).getroot()
        suite = root if root.tag == "testsuite" else root.find("testsuite")
        tests = [(float(case.get("time", 0)), f"{case.get('classname')}::{case.get('name')}")
                 for case in suite.iter("testcase")]
        found[path.stem] = (float(suite.get("time", 0)), tests)
    return found


def table(found: dict) -> str:
    lines = ["# Where make test's time goes", "",
             "pytest's own durations (setup + call + teardown) of each run `make test` made, written by "
             "tools/durations.py from the JUnit files in benchmark-results/durations/. Baked suites run inside a "
             "top-level test, so their time is also in that test's; the suites run two at a time (pytest-xdist), "
             "so the rows add up to more than the wall time.", "",
             "| suite | tests | wall s | slowest test s |", "|---|---|---|---|"]
    for name, (wall, tests) in sorted(found.items(), key=lambda item: -item[1][0]):
        lines.append(f"| {name} | {len(tests)} | {wall:.0f} | {max((t for t, _ in tests), default=0):.0f} |")
    everything = sorted(((seconds, f"{name}: {test}") for name, (_, tests) in found.items() for seconds, test in tests),
                        reverse=True)
    lines += ["", f"The {SLOWEST} slowest tests of all runs:", "", "| s | test |", "|---|---|"]
    lines += [f"| {seconds:.1f} | {test} |" for seconds, test in everything[:SLOWEST]]
    files = {}
    for name, (_, tests) in found.items():
        for seconds, test in tests:
            files[f"{name}: {test.split('::')[0]}"] = files.get(f"{name}: {test.split('::')[0]}", 0.0) + seconds
    lines += ["", f"The {SLOWEST} slowest test files of all runs (their tests' seconds added up):", "",
              "| s | file |", "|---|---|"]
    lines += [f"| {seconds:.1f} | {file} |" for file, seconds in sorted(files.items(), key=lambda item: -item[1])[:SLOWEST]]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    folder = Path(argv[0]) if argv else ROOT / "benchmark-results" / "durations"
    print(table(suites(folder)), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
