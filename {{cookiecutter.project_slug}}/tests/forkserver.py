"""A fork server for the tests: each training run forked from one process that imported the libraries once.

Every training run in the tests is a fresh process (conftest.py), and a fresh process spends 6-10 CPU-seconds
importing torch, torch_xla, transformers, accelerate, datasets and peft before it trains; with a few hundred runs
that is a large part of the suite's time on a small machine. Here one helper process a pytest session (started on
first use, stopped at exit) imports them once. Each run is a fork of it that takes the run's environment, folder,
arguments and output files, then runs the module or the `-c` code as `__main__` and ends as `python -m` or
`python -c` would: the same exit status, a traceback on stderr for an uncaught exception, the atexit handlers run
and the output flushed (only the slow teardown of every module is skipped, see _exit).

Forking is safe because the helper never starts the XLA runtime nor computes with torch: no XLA or OpenMP thread
is lost in the child (benchmarks/isolation.py forks its measurements for the same reason). A fork keeps what the
imports read from the environment when they ran, so conftest.py sends a run here only when its environment is the
helper's but for variables that nothing imported reads (its RUNTIME_VARIABLES), and the child gets the changes
those imports made to the helper's environment (torch_xla's defaults, its XLA_FLAGS). A helper may first run a
prelude that every one of its runs runs first: the runs with torch_xla hidden (a laptop, gloo workers) have a helper
of their own that hid it before importing. Standard library only.
"""

import importlib.machinery
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

# Read when an interpreter starts, which a fork does not: the child does what it asks for itself (_run_child).
EMULATED_VARIABLES = {"PYTHONUNBUFFERED"}
# Variables of flags that nothing reads before the XLA runtime starts (in the child), and that an import only
# extends with its defaults: torch_xla's import appends each of its flags that XLA_FLAGS lacks (_setup_xla_flags).
# A run may set them differently: the child gets its own flags plus the defaults the import added that it lacks.
FLAG_VARIABLES = {"XLA_FLAGS"}
READY_TIMEOUT = 900  # seconds for the helper's imports, on a loaded machine
STOP_TIMEOUT = 60


class ForkServerError(RuntimeError):
    """The helper failed to start or died; TESTS_NO_FORKSERVER=1 runs everything as plain subprocesses."""


class Channel:
    """JSON messages, one a line, over a socket; receive() waits up to `timeout` seconds (None: no limit)."""

    def __init__(self, sock: socket.socket):
        self.sock, self.pending = sock, b""

    def send(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self, timeout: float | None = None) -> dict | None:
        """The next message, or None if none came in time; EOFError once the other end is closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.sock], [], [], left)[0]:
                return None
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("the fork server's other end closed")
            self.pending += data
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def has_message(self) -> bool:
        return b"\n" in self.pending


# The test side.


class ForkServer:
    """The helper process for runs in `cwd`, started with `env` (the environment it imports under) and `preload`."""

    def __init__(self, cwd, env: dict, preload, prelude: str = ""):
        self.cwd, self.env, self.owner = str(cwd), dict(env), os.getpid()
        self.folder = tempfile.mkdtemp(prefix="forkserver-")
        self.lock = threading.Lock()
        self.runs, self.started = 0, None
        ours, theirs = socket.socketpair()
        self.channel = Channel(ours)
        self.log = os.path.join(self.folder, "server.log")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno()), self.folder, prelude, *preload],
                cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT, pass_fds=[theirs.fileno()],
            )
        theirs.close()
        try:
            ready = self._receive(READY_TIMEOUT, "start")
        except BaseException:
            self.close()
            raise
        # Variables the imports changed in the helper's environment: a run may not set these differently.
        self.import_changes = set(ready["import_changes"])

    def routable(self, env: dict, runtime_variables) -> bool:
        """Whether a run with `env` would import the preloaded modules as the helper did."""
        differing = {key for key in self.env.keys() | env.keys() if self.env.get(key) != env.get(key)}
        free = differing & (FLAG_VARIABLES | EMULATED_VARIABLES)
        return differing - free <= set(runtime_variables) and not (differing - free) & self.import_changes

    def run(self, command, kind: str, target: str, args, env: dict, timeout: float):
        """(returncode, stdout, stderr) of `python -m target *args` (kind "-m") or `python -c target *args`.

        Past `timeout` seconds the child is killed and subprocess.TimeoutExpired raised, as subprocess.run does.
        """
        with self.lock:
            self._end_started()
            self.runs += 1
            out, err = (os.path.join(self.folder, f"run-{self.runs}.{name}") for name in ("out", "err"))
            self._request(kind, target, args, env, out, err)
            try:
                self._receive(STOP_TIMEOUT, "fork")
                finished = self._receive(timeout, "run")
            except BaseException:  # interrupted (Ctrl-C): stop the child as subprocess.run does
                self._stop_child()
                raise
            if finished is None:
                self._stop_child()
                raise subprocess.TimeoutExpired(command, timeout, output=self._take(out), stderr=self._take(err))
            return finished["returncode"], self._decode(self._take(out)), self._decode(self._take(err))

    def start(self, kind: str, target: str, args, env: dict, stdout: str, stderr: str) -> "ForkedProcess":
        """Start the run and return at once (a subprocess.Popen's few methods), its output going to the files
        `stdout` and `stderr` as it is written. The helper serves one run at a time: a later run or start kills this
        one if it is still running (a test that failed before it waited for it)."""
        with self.lock:
            self._end_started()
            self._request(kind, target, args, env, stdout, stderr)
            self.started = ForkedProcess(self, self._receive(STOP_TIMEOUT, "fork")["pid"])
            return self.started

    def _request(self, kind: str, target: str, args, env: dict, stdout: str, stderr: str) -> None:
        self.channel.send({"kind": kind, "target": target, "args": list(args), "env": env, "cwd": self.cwd,
                           "stdout": stdout, "stderr": stderr})

    def _end_started(self) -> None:
        """Kill a started run whose end nobody read (a test that failed while it ran) and read its end."""
        if self.started is not None and self.started.poll() is None:
            self.started.kill()
            self.started.wait(STOP_TIMEOUT)
        self.started = None

    def _receive(self, timeout, what):
        try:
            message = self.channel.receive(timeout)
        except (EOFError, OSError) as error:
            raise ForkServerError(f"the fork server died ({what}): {error}\n{self._log_tail()}") from None
        if message is not None and "error" in message:
            raise ForkServerError(f"the fork server failed ({what}): {message['error']}\n{self._log_tail()}")
        if message is None and what == "start":
            raise ForkServerError(f"the fork server did not start in {timeout} s\n{self._log_tail()}")
        return message

    def _stop_child(self) -> None:
        """Kill the running child and wait for the helper's word that it ended (the pid first, if not read yet)."""
        try:
            self.channel.send({"kill": True})
            deadline = time.monotonic() + STOP_TIMEOUT
            while (message := self.channel.receive(max(0.0, deadline - time.monotonic()))) is not None:
                if "returncode" in message:
                    return
        except (EOFError, OSError):
            pass
        self.close()  # it did not answer: no later run may use it

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as log:
                return log.read()[-5000:].decode(errors="replace")
        except OSError:
            return ""

    @staticmethod
    def _take(path) -> bytes:
        try:
            with open(path, "rb") as file:
                data = file.read()
            os.unlink(path)
        except FileNotFoundError:
            return b""
        return data

    @staticmethod
    def _decode(data: bytes) -> str:
        # What subprocess.run(text=True) gives: the default text encoding, universal newlines ("\r" ends a line too).
        return io.TextIOWrapper(io.BytesIO(data)).read()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and self.channel.sock.fileno() >= 0

    def close(self) -> None:
        """Stop the helper (it exits when its end of the socket closes) and remove its folder."""
        if os.getpid() != self.owner:  # a fork of the test process (multiprocessing) must leave it alone
            return
        self.channel.sock.close()
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class ForkedProcess:
    """A run started by ForkServer.start: what the tests use of subprocess.Popen (pid, poll, wait, send_signal,
    kill, returncode). Its pid is the run's own process: a signal sent to it reaches the run as it would a
    subprocess."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid, self.returncode = server, pid, None

    def poll(self) -> int | None:
        return self._finish(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._finish(timeout) is None:
            raise subprocess.TimeoutExpired(f"forked run {self.pid}", timeout)
        return self.returncode

    def _finish(self, timeout) -> int | None:
        if self.returncode is None:
            message = self.server._receive(timeout, "run")
            if message is not None:
                self.returncode = message["returncode"]
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# The helper's side.


def _parent_death_signal(signum: int) -> None:
    """Ask Linux to send `signum` to this process when its parent exits (best effort: nothing elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _preload(names, folder) -> tuple[bytes, bytes, list[str]]:
    """Import `names`; return what the imports wrote to stdout and stderr (each run replays it) and the failures.

    A module that fails to import is left out: a run that needs it fails to import it in its own process.
    """
    captured = [os.path.join(folder, f"preload.{name}") for name in ("out", "err")]
    saved = [os.dup(1), os.dup(2)]
    for fd, path in zip((1, 2), captured, strict=True):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    failed = []
    try:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:
                failed.append(f"{name}: {traceback.format_exc(limit=-1).strip()}")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)
    output = []
    for path in captured:
        with open(path, "rb") as file:
            output.append(file.read())
        os.unlink(path)
    return output[0], output[1], failed


def _runtime_started() -> bool:
    xla = sys.modules.get("torch_xla")
    return xla is not None and xla._XLAC._xla_runtime_is_initialized()


def _child_environment(requested: dict, before: dict, after: dict) -> dict:
    """The run's environment with the changes the helper's imports made to the same starting values."""
    env = dict(requested)
    for key in before.keys() | after.keys():
        if before.get(key) != after.get(key) and requested.get(key) == before.get(key):
            if key in after:
                env[key] = after[key]
            else:
                env.pop(key, None)
        elif key in FLAG_VARIABLES and before.get(key) != after.get(key):
            env[key] = _with_added_flags(requested.get(key, ""), before.get(key, ""), after.get(key, ""))
    return env


def _flag_name(flag: str) -> str:
    return flag.lstrip("-").split("=", 1)[0]


def _with_added_flags(requested: str, before: str, after: str) -> str:
    """`requested` flags plus those the import appended to `before` (giving `after`) that `requested` lacks."""
    present = {_flag_name(flag) for flag in requested.split()}
    old = set(before.split())
    added = [flag for flag in after.split() if flag not in old and _flag_name(flag) not in present]
    return " ".join([*requested.split(), *added])


def _wait(pid: int, channel: Channel, folder: str) -> int:
    """The child's returncode (negative: the signal that ended it); kills it on request or when the tests are gone."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if not channel.has_message():
                watched = [channel.sock] + ([pidfd] if pidfd is not None else [])
                if channel.sock not in select.select(watched, [], [], None if pidfd is not None else 0.05)[0]:
                    continue
            try:
                message = channel.receive(0)
            except EOFError:  # the test process is gone: so is its run
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                _leave(folder)
            if message is not None and message.get("kill"):
                os.kill(pid, signal.SIGKILL)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _leave(folder: str) -> None:
    """The tests are done (or gone): remove the runs' files, exit without the interpreter's slow teardown."""
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(0)


def _serve(channel: Channel, before: dict, after: dict, folder: str):
    """Fork a child for each request; returns (request, environment) in the child, never in the helper."""
    while True:
        try:
            request = channel.receive()
        except EOFError:
            _leave(folder)
        if "kill" in request:  # for a child that ended meanwhile
            continue
        env = _child_environment(request["env"], before, after)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request, env
        channel.send({"pid": pid})
        channel.send({"returncode": _wait(pid, channel, folder)})


def _run_child(request: dict, env: dict, replay: tuple[bytes, bytes]) -> None:
    """Become the run: its environment, folder and output files, then its module or code as __main__."""
    _parent_death_signal(signal.SIGKILL)  # the helper kills it on request; this covers the helper being killed
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    for fd, path, early in zip((1, 2), (request["stdout"], request["stderr"]), replay, strict=True):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
        os.write(fd, early)
    if env.get("PYTHONUNBUFFERED"):  # what `python -u` does: no buffer between print() and the file
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=stream.encoding,
                                                errors=stream.errors, write_through=True))
    kind, target, args = request["kind"], request["target"], request["args"]
    sys.orig_argv = [sys.executable, kind, target, *args]
    try:
        if kind == "-m":
            sys.argv = ["-m", *args]
            sys.path[0] = os.getcwd()  # what `python -m` puts first on the path
            import runpy

            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *args]
            main = types.ModuleType("__main__")
            main.__builtins__, main.__loader__ = __builtins__, importlib.machinery.BuiltinImporter
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
    except SystemExit as done:
        _exit(_exit_status(done.code))
    except BaseException as error:  # what an uncaught exception does: the traceback (from the run's code on), 1
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        sys.excepthook(type(error), error.with_traceback(tb), tb)  # the printed one is the exception's own
        _exit(1)
    _exit(0)


def _exit_status(code) -> int:
    """The status the interpreter exits with for SystemExit(code); a code that is no number goes to stderr."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _exit(status: int) -> None:
    """End as the interpreter does (wait for the threads, run the atexit handlers, flush stdout and stderr), but
    without tearing its thousands of modules down one by one: that took about 2 s a run on 2 cores, and a run's
    report and checkpoints are written and closed before it ends (the suites pass the same with
    TESTS_NO_FORKSERVER=1)."""
    threading._shutdown()  # the interpreter's own first step: wait for the threads that are not daemons
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # the interpreter's status when it cannot flush stdout
    os._exit(status)


def main(fd: int, folder: str, prelude: str, preload) -> None:
    channel = Channel(socket.socket(fileno=fd))
    sys.path[0] = ""  # as `python -c` has it: the run's folder, not this file's
    exec(compile(prelude, "<prelude>", "exec"), {"sys": sys})  # what every run's code does first (hiding torch_xla)
    before = dict(os.environ)
    out, err, failed = _preload(preload, folder)
    if failed:
        print(*failed, sep="\n", file=sys.stderr, flush=True)  # to the helper's log
    after = dict(os.environ)
    if _runtime_started():
        channel.send({"error": "importing the preloaded modules started the XLA runtime: forking it is unsafe"})
        os._exit(1)
    changes = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    channel.send({"ready": True, "import_changes": changes})
    request, env = _serve(channel, before, after, folder)
    channel.sock.close()
    _run_child(request, env, (out, err))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:])
