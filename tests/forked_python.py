"""``python -m MODULE ARGS`` as a process forked from an interpreter that has already imported torch.

Importing torch and its company is about 2 s of every command's start, and tests/test_cli_errors.py runs
dozens of short commands. A *zygote* is started once, as a real interpreter with the commands' environment;
it imports torch and the other libraries the commands load (never mt itself) and then, for each command,
forks a child that changes into the command's directory, takes its stdin, stdout and stderr from files
(``dup2`` onto fds 0-2, so the interpreter's own streams, with their encodings and buffering, are the ones a
fresh ``python -m`` would have) and runs the module as ``-m`` does. ``Zygote.run`` gives back a
``subprocess.CompletedProcess``, as ``subprocess.run`` does; ``Zygote.start`` a ``ForkedProcess`` to poll, signal
and wait for, as a ``subprocess.Popen`` (tests/test_train_loop.py kills training runs that way).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# The zygote's program: one JSON request a line in, one exit status a line out.
ZYGOTE = r"""
import atexit, json, os, runpy, sys, traceback
# imported once, before any fork: torch and the libraries the commands import after it
import datasets, hydra, sacrebleu, sentencepiece, torch, torch._dynamo  # noqa: F401, E401

requests, answers = os.fdopen(int(sys.argv[1]), "r"), os.fdopen(int(sys.argv[2]), "w")


def run(job):
    os.chdir(job["cwd"])
    for fd, (path, flags) in enumerate(((job["stdin"], os.O_RDONLY), (job["stdout"], os.O_WRONLY),
                                        (job["stderr"], os.O_WRONLY))):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    requests.close()
    answers.close()
    sys.argv = [job["module"], *job["args"]]
    code = 0
    try:
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
    except SystemExit as stop:  # what the interpreter does with it
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


for line in requests:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            run(job)  # ends the child with the command's exit status
        except BaseException:  # before the command ran (a missing directory): never back into this loop
            traceback.print_exc()
        os._exit(1)
    answers.write(f"{pid}\n")
    answers.flush()
    _, status = os.waitpid(pid, 0)
    answers.write(f"{os.waitstatus_to_exitcode(status)}\n")
    answers.flush()
"""


class Zygote:
    """A forking interpreter with ``env``; ``run`` is ``subprocess.run([python, "-m", module, *args], ...)``."""

    def __init__(self, env: dict[str, str]) -> None:
        request_r, self._requests = os.pipe()
        self._answers, answer_w = os.pipe()
        self._process = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(request_r), str(answer_w)],
                                         env=env, pass_fds=(request_r, answer_w), stdin=subprocess.DEVNULL)
        os.close(request_r)
        os.close(answer_w)
        self._request_file = os.fdopen(self._requests, "w")
        self._running: ForkedProcess | None = None

    def run(self, module: str, args: list[str], cwd: Path, stdin: bytes = b"", timeout: float = 300
            ) -> subprocess.CompletedProcess:
        """``subprocess.run`` of ``python -m module args``, bytes out; ``TimeoutExpired`` after ``timeout`` s."""
        return self.start(module, args, cwd, stdin).wait(timeout)

    def start(self, module: str, args: list[str], cwd: Path, stdin: bytes = b"") -> ForkedProcess:
        """``subprocess.Popen`` of ``python -m module args``: one at a time (the zygote waits for each child)."""
        if self._running is not None and self._running.returncode is None:
            raise RuntimeError("the zygote runs one command at a time: wait for the last one first")
        scratch = tempfile.TemporaryDirectory(prefix="forked_python_")
        streams = {name: Path(scratch.name) / name for name in ("stdin", "stdout", "stderr")}
        streams["stdin"].write_bytes(stdin)
        streams["stdout"].touch()
        streams["stderr"].touch()
        job = {"module": module, "args": args, "cwd": str(cwd), **{k: str(v) for k, v in streams.items()}}
        self._request_file.write(json.dumps(job) + "\n")
        self._request_file.flush()
        self._running = ForkedProcess(self, [sys.executable, "-m", module, *args], int(self._answer()), scratch)
        return self._running

    def _answer(self) -> str:
        """One line from the zygote, read unbuffered (``select`` must see what is not read yet)."""
        line = b""
        while not line.endswith(b"\n"):
            byte = os.read(self._answers, 1)
            if not byte:
                raise RuntimeError(f"the zygote exited (status {self._process.wait()})")
            line += byte
        return line.decode()

    def close(self) -> None:
        if self._running is not None and self._running.returncode is None:  # a test failed before its wait
            self._running.send_signal(signal.SIGKILL)
            self._running.poll(None)
        self._request_file.close()  # the zygote's loop ends
        os.close(self._answers)
        self._process.wait(timeout=30)


class ForkedProcess:
    """A command forked by a ``Zygote``: ``pid``, ``poll``, ``send_signal`` and ``wait`` as on a ``Popen``;
    its stdout and stderr are files, read once it has ended (``wait``, or ``output`` after ``poll``)."""

    def __init__(self, zygote: Zygote, args: list[str], pid: int, scratch: tempfile.TemporaryDirectory) -> None:
        self.args, self.pid, self.returncode = args, pid, None
        self._zygote, self._scratch = zygote, scratch

    def poll(self, timeout: float = 0) -> int | None:
        """The exit status (negative: the signal) once the command has ended, else None after ``timeout`` s."""
        if self.returncode is None and select.select([self._zygote._answers], [], [], timeout)[0]:
            self.returncode = int(self._zygote._answer())
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def output(self) -> tuple[bytes, bytes]:
        """What the command wrote to stdout and stderr so far."""
        directory = Path(self._scratch.name)
        return (directory / "stdout").read_bytes(), (directory / "stderr").read_bytes()

    def wait(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """The ended command as ``subprocess.run`` gives it; SIGKILL and ``TimeoutExpired`` after ``timeout``."""
        try:
            if self.poll(timeout) is None:
                self.send_signal(signal.SIGKILL)
                self.poll(None)
                raise subprocess.TimeoutExpired(self.args, timeout)
            return subprocess.CompletedProcess(self.args, self.returncode, *self.output())
        finally:
            self._scratch.cleanup()
