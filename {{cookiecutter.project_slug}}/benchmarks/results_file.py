"""A benchmark run as one plain JSON file: when and where it ran, and each benchmark's record.

Every run of the suite writes benchmark-results/results.json; the template's reference run, made when the template
is released, is committed as docs/reference-results.json. The page (page.py) and its pictures are drawn from such
a file and from nothing else, so that a test can hold every figure on the page to it. Plain data only: reading it
runs no code.
"""

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from .records import Record

RESULTS_NAME = "results.json"
REFERENCE = Path("docs") / "reference-results.json"
FORMAT = 1


def machine() -> str:
    """'AMD EPYC 7B13, 2 cores': the CPU's model name (from /proc/cpuinfo where Linux has it) and its cores."""
    name = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                name = line.partition(":")[2].strip()
                break
    return f"{name or platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def as_dict(records, *, profile: str, wall_s: float | None, made: datetime | None = None) -> dict:
    """The file's contents for `records` of a run of `profile` that took `wall_s` seconds."""
    made = made or datetime.now(timezone.utc)
    devices = sorted({str(record.extra_info["device"]) for record in records if record.extra_info.get("device")})
    return {
        "format": FORMAT,
        "made": made.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "python": platform.python_version(),
        "devices": devices,
        "profile": profile,
        "suite_wall_s": None if wall_s is None else round(wall_s, 1),
        "records": [{"group": record.group, "name": record.name, "outcome": record.outcome, "wall_s": record.wall_s,
                     "extra_info": record.extra_info} for record in records],
    }


def save(records, folder: Path, **run) -> Path:
    path = Path(folder) / RESULTS_NAME
    path.write_text(json.dumps(as_dict(records, **run), indent=1, sort_keys=True, default=str) + "\n")
    return path


def merged(*runs: dict) -> dict:
    """Several runs of one project as one (the suite, then its timed benchmarks alone): the first run's description,
    every run's records, their wall times added."""
    first = dict(runs[0])
    first["records"] = [record for run in runs for record in run["records"]]
    walls = [run.get("suite_wall_s") for run in runs]
    first["suite_wall_s"] = None if None in walls else round(sum(walls), 1)
    first["devices"] = sorted({device for run in runs for device in run.get("devices", [])})
    return first


def load(path: Path) -> dict:
    run = json.loads(Path(path).read_text())
    if run.get("format") != FORMAT:
        raise ValueError(f"{path}: not a results file of format {FORMAT} (written by benchmarks/results_file.py)")
    return run


def records(run: dict) -> list[Record]:
    return [Record(group=entry["group"], name=entry["name"], outcome=entry["outcome"], wall_s=entry.get("wall_s"),
                   extra_info=entry.get("extra_info", {})) for entry in run["records"]]
