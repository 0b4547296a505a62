"""torch_xla's own account of each compilation: why it happened and which Python line triggered it.

With PT_XLA_DEBUG_LEVEL=1 and PT_XLA_DEBUG_FILE set before the runtime starts, torch_xla writes one
"Compilation Analysis" block per compilation; the graph watch (graph_watch.py) reads them as it goes.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from ..xla import compilation

HOST_READ = "most likely user code trying to access tensor value before torch_xla.sync"
# Frames of these libraries are not where a user fixes anything.
LIBRARY_PATH = re.compile(r"[/\\](site-packages|dist-packages|lib/python\d\.\d+)[/\\]")


@dataclass
class Analysis:
    cause: str
    frame: str | None


def enable_analysis(folder: Path, process: str) -> Path | None:
    """Ask torch_xla to explain each compilation in a file; before the runtime starts, else it is too late.

    Returns the file, or None where the user set PT_XLA_DEBUG_LEVEL already (their setting wins) or the
    runtime of this process already runs (a second run in one notebook process).
    """
    path = folder / f"compilations-{process}.log"  # process: hosts.process_label(), unique across hosts
    if not compilation.enable_analysis(path):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def parse_analyses(text: str) -> list[Analysis]:
    """The "Compilation Analysis" blocks of torch_xla's debug output, in order."""
    found = []
    for block in text.split("Compilation Analysis: Compilation Cause")[1:]:
        lines = [line.removeprefix("Compilation Analysis:").strip() for line in block.splitlines()]
        cause = lines[1] if len(lines) > 1 else "unknown"
        frames = []
        if "Python Frame Triggered Execution:" in lines:
            for line in lines[lines.index("Python Frame Triggered Execution:") + 1:]:
                if not line or line.startswith("---") or line.startswith("==="):
                    break
                if line.strip(".") and not line.startswith("sync ("):  # "....." marks a cut stack; sync() is the cut
                    frames.append(line)
        # Innermost first: the user's own line where the stack reaches it, else the library line that did it.
        user = [frame for frame in frames if not LIBRARY_PATH.search(frame)]
        found.append(Analysis(cause, (user or frames or [None])[0]))
    return found
