"""Launch a baked project's gloo-worker driver many times; dump every process of a launch that hangs.

The driver is the one tests/test_chip_count.py runs (conftest.WORKERS, started by conftest.workers_command with
conftest.child_env(xla=False) and the test's own flags, test_chip_count.DEMO): imported from the baked project's
tests, so this runs exactly what the test runs. A launch that outlives --timeout is taken apart before it is killed:
for the driver and every worker, its Python and native stacks (py-spy and gdb), its TCP sockets, and which
processes listen on the master port.

    .venv/bin/pip install py-spy        # optional: the Python frames (gdb alone gives native frames only)
    .venv/bin/python tools/repro_gloo_hang.py build/demo/tpu_text_classifier --processes 4 --launches 20

Flags after `--` are added to the test's (e.g. `-- --num_epochs 1` for quicker launches: the hang is at start-up).
Prints one summary line; every launch's output, and the dumps of a hung one, are under --out.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

# A worker forked while another thread of the driver held glibc's resolver lock waits for it here forever.
RESOLVER_LOCK = "__resolv_context_get"
PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def stacks(pid: int) -> str:
    """py-spy's Python+native stacks of the Python threads, then gdb's native stack of every thread (py-spy leaves
    out threads Python never saw, such as the TCPStore server's `pt_tcpstore_uv`)."""
    text = ""
    if os.access(PY_SPY, os.X_OK):
        done = subprocess.run([PY_SPY, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=120)
        # Without py-spy's header, which repeats the whole command line.
        text = done.stdout[done.stdout.find("Python v"):] if done.returncode == 0 else f"py-spy failed: {done.stderr[-500:]}"
    if shutil.which("gdb"):
        done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "info threads", "-ex", "thread apply all bt 30"],
                              capture_output=True, text=True, timeout=180)
        text += "\ngdb:\n" + "\n".join(line for line in done.stdout.splitlines() if line.startswith(("#", "Thread", " ", "*")))
    return text or "neither py-spy nor gdb is installed"


def sockets(process: psutil.Process) -> list[str]:
    try:
        return [f"{c.status} {c.laddr.ip}:{c.laddr.port} -> {c.raddr.ip + ':' + str(c.raddr.port) if c.raddr else '-'}"
                for c in process.net_connections(kind="tcp")]
    except psutil.Error as error:
        return [f"unreadable: {error!r}"]


def session(leader: int) -> list[psutil.Process]:
    """The driver and every process it started, orphans included: all of them are in the driver's session."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == leader:
                found.append(process)
        except (OSError, psutil.Error):
            pass
    return found


def dump_hung(driver: int, port: int, record: Path, folder: Path) -> dict:
    """Everything about a hung launch, written to folder/dump.txt; returns a short summary."""
    tree = session(driver)
    # Every process listening on the master port. Forked workers inherit the store's listening socket, so the tree
    # shows up here; a process outside it would be a port collision.
    holders = []
    for process in psutil.process_iter():
        try:
            if any(c.status == "LISTEN" and c.laddr.port == port for c in process.net_connections(kind="tcp")):
                holders.append(f"{process.pid}{'' if process in tree else ' (outside the launch)'}")
        except psutil.Error:
            pass
    started = {p.name: p.read_text() for p in record.glob("pid-*")}  # written by each worker's run() on entry
    lines = [f"master port {port}; listening on it: {holders}", f"workers that entered run(): {started}"]
    for process in tree:
        try:
            lines += ["", "=" * 100, f"pid {process.pid} ppid {process.ppid()} status {process.status()} "
                      f"threads {process.num_threads()} cpu {process.cpu_times()}",
                      " ".join(process.cmdline())[:300], "tcp:", *sockets(process), "stacks:", stacks(process.pid)]
        except (psutil.Error, subprocess.TimeoutExpired) as error:
            lines.append(f"pid {process.pid}: {error!r}")
    (folder / "dump.txt").write_text("\n".join(lines))
    stuck = [block.split()[1] for block in "\n".join(lines).split("=" * 100) if RESOLVER_LOCK in block]
    return {"port": port, "port_listeners": holders, "entered_run": started, "pids": [p.pid for p in tree],
            "waiting_for_resolver_lock": stuck}


def launch(conftest, flags: list[str], processes: int, folder: Path, timeout: float) -> tuple[str, float, dict]:
    command, record = conftest.workers_command(folder, processes, *flags)
    port = int(command[4])  # [python, -c, WORKERS, processes, port, record, hosts, *argv]
    start = time.time()
    # Pipes read by communicate(), as the test's subprocess.run(capture_output=True) has them (not files: the
    # workers share the driver's stdout and stderr). Own session: the tree is killed by its group, nothing else.
    child = subprocess.Popen(command, cwd=conftest.PROJECT, env=conftest.child_env(xla=False), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
        outcome, details = ("passed" if child.returncode == 0 else f"failed({child.returncode})"), {"port": port}
    except subprocess.TimeoutExpired:
        outcome, details = "hung", dump_hung(child.pid, port, record, folder)
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
    (folder / "stdout.txt").write_text(out)
    (folder / "stderr.txt").write_text(err)
    return outcome, time.time() - start, details


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                      usage="%(prog)s PROJECT [options] [-- training flags]")
    options.add_argument("project", type=Path, help="a baked project folder (the one holding tests/conftest.py)")
    options.add_argument("--processes", type=int, default=4)
    options.add_argument("--launches", type=int, default=20)
    options.add_argument("--timeout", type=float, default=180, help="seconds before a launch counts as hung")
    options.add_argument("--out", type=Path, default=Path("/tmp/gloo-hang"), help="launch folders and dumps")
    options.add_argument("--load", type=int, default=0, help="busy-loop processes to run alongside (a loaded machine)")
    # Everything after `--` goes to the training command line (argparse would take it for this script's own).
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = options.parse_args(argv[:split])
    args.extra = argv[split + 1:]

    project = args.project.resolve()
    sys.path[:0] = [str(project / "tests"), str(project)]  # conftest imports forkserver and the package
    import conftest
    import test_chip_count

    if not os.access(PY_SPY, os.X_OK):
        print(f"py-spy not found: hung processes get gdb's native stacks only ({sys.executable} -m pip install py-spy)")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for number in range(args.launches):
            folder = args.out / f"launch-{number:03d}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            flags = [*test_chip_count.DEMO, *args.extra]
            outcome, seconds, details = launch(conftest, flags, args.processes, folder, args.timeout)
            results.append({"launch": number, "outcome": outcome, "seconds": round(seconds, 1), **details})
            print(f"launch {number}: {outcome} in {seconds:.1f} s (port {details['port']})", flush=True)
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
    finally:
        for burner in burners:
            burner.kill()
    count = {kind: sum(r["outcome"].startswith(kind) for r in results) for kind in ("passed", "hung", "failed")}
    print(f"launches {len(results)}, passed {count['passed']}, hung {count['hung']}, failed {count['failed']}; "
          f"processes {args.processes}; dumps and outputs in {args.out} (results.json, launch-*/dump.txt)")


if __name__ == "__main__":
    main()
