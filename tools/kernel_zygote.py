"""Python kernels forked from one process that has already imported torch (for the test suite).

Every chapter's kernel starts by importing torch, numpy and ipykernel: about 3.5 s of CPU each,
for each of the 10 notebooks nbval runs and each kernel the live tests start. Here one process
(the zygote) imports them once; each kernel is a fork of it, which starts in a fraction of a
second. A fork is the kernel a fresh process would be once it had imported the same modules:
the same code and the same module state, in the notebook's folder, with the environment and
standard streams that Jupyter gave the kernel.

    python tools/kernel_zygote.py run -- COMMAND...   # COMMAND's Python kernels are forked

`run` starts the zygote, points Jupyter's `python3` kernel at it (JUPYTER_PATH) for COMMAND, and
stops it afterwards. The kernel Jupyter starts is a small client (`kernel`): it hands its
arguments, environment, folder and standard streams to the zygote, relays interrupts to the
fork, and lives as long as the fork does (a fork whose client is killed exits too). If no
zygote answers (not started yet, or gone), the client becomes an ordinary kernel: the same
`python -m ipykernel_launcher`, only slower to start.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

# What every chapter's kernel imports first (transformer_course.notebook.setup): no more, since
# matplotlib must pick its backend in the kernel, after ipykernel has set it.
PRELOAD = ("torch", "numpy", "ipykernel.kernelapp")
HEADER = struct.Struct("!I")  # the request's length, before its JSON
READY_TIMEOUT = 60  # seconds for the zygote's imports


def _request(connection: socket.socket) -> tuple[dict, list[int]]:
    """One client's request (JSON) and the three standard streams it passed along."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    (length,) = HEADER.unpack(data[: HEADER.size])
    data = data[HEADER.size :]
    while len(data) < length:
        chunk = connection.recv(length - len(data))
        if not chunk:
            raise ConnectionError("the client left mid-request")
        data += chunk
    return json.loads(data), fds


def _wait_for_exit(pid: int) -> None:
    """Return once process `pid` (not necessarily a child of ours) has ended."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (macOS) or already gone
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # readable once the process has ended
        while not poller.poll():
            pass
    finally:
        os.close(fd)


def _exit_after(pid: int) -> None:
    """End this process once process `pid` has ended."""
    _wait_for_exit(pid)
    os._exit(1)


def _become_kernel(request: dict, fds: list[int]) -> None:
    """In the fork: take the client's streams, folder and environment, then run the kernel."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores its children: not a kernel
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # Gone with its client (Jupyter stops a kernel by stopping the process it started) or with
    # Jupyter itself (JPY_PARENT_PID: what an ordinary kernel watches).
    argv = list(request["argv"])
    watched = [request["pid"]]
    parent = os.environ.get("JPY_PARENT_PID", "")
    if parent.isdigit() and int(parent) > 1:
        watched.append(int(parent))
        # ipykernel read JPY_PARENT_PID when the zygote imported it: give it this kernel's.
        argv.append(f"--IPKernelApp.parent_handle={parent}")
    for pid in watched:
        threading.Thread(target=_exit_after, args=(pid,), daemon=True).start()
    # As `python -m ipykernel_launcher` in this folder: the launcher drops the folder from
    # sys.path while it loads, and IPython puts '' back.
    sys.path[0] = os.getcwd()
    sys.argv = ["ipykernel_launcher", *argv]
    import runpy

    code = 0
    try:
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def serve(path: str) -> None:
    """The zygote: import PRELOAD, then fork a kernel for each client that connects to `path`."""
    for name in PRELOAD:
        __import__(name)
    tasks = "/proc/self/task"
    if threading.active_count() != 1 or (os.path.isdir(tasks) and len(os.listdir(tasks)) != 1):
        # A fork copies only the forking thread: a thread pool started by an import would be
        # missing in every kernel. (With OMP_NUM_THREADS=1 none starts; clients fall back.)
        sys.exit("kernel_zygote: an import started a thread; not forking kernels")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernels are reaped as they end
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ready = f"{path}.binding"
    listener.bind(ready)
    listener.listen(16)
    os.replace(ready, path)  # clients see the socket only once it accepts them
    try:
        while True:
            connection, _ = listener.accept()
            with connection:
                try:
                    request, fds = _request(connection)
                except (OSError, ValueError, ConnectionError):
                    continue
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    connection.close()
                    _become_kernel(request, fds)
                for fd in fds:
                    os.close(fd)
                connection.sendall(f"{pid}\n".encode())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def kernel(path: str, argv: list[str]) -> None:
    """What Jupyter starts as the kernel: ask the zygote for a fork, or be an ordinary kernel."""
    ordinary = [sys.executable, "-m", "ipykernel_launcher", *argv]
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(path)
        payload = json.dumps(
            {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "pid": os.getpid()}
        ).encode()
        socket.send_fds(connection, [HEADER.pack(len(payload)) + payload], [0, 1, 2])
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = connection.recv(64)
            if not chunk:
                raise ConnectionError("the zygote closed the connection")
            answer += chunk
        pid = int(answer)
    except (OSError, ValueError):
        os.execv(sys.executable, ordinary)

    # Jupyter interrupts and stops the kernel with signals to this process: pass them on.
    def forward(signum: int, _frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    _wait_for_exit(pid)


def kernelspec(folder: Path, path: str) -> None:
    """Write Jupyter's `python3` kernel into folder/kernels/python3, as a client of `path`."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve())
    spec_json = {
        "argv": [sys.executable, here, "kernel", path, "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"debugger": True},
        "kernel_protocol_version": "5.5",
    }
    (spec / "kernel.json").write_text(json.dumps(spec_json, indent=1))


@contextlib.contextmanager
def forked_kernels(env: dict[str, str], wait: bool = True) -> Iterator[dict[str, str]]:
    """Start a zygote (with `env`); yield `env` with Jupyter's python3 kernel forked from it,
    once the zygote is ready (`wait`) or at once."""
    with tempfile.TemporaryDirectory(prefix="kernel-zygote-") as folder:
        path = os.path.join(folder, "zygote.sock")
        kernelspec(Path(folder), path)
        zygote = subprocess.Popen([sys.executable, __file__, "serve", path], env=env)
        paths = [folder, *filter(None, env.get("JUPYTER_PATH", "").split(os.pathsep))]
        try:
            # Ready in about 3 s; a kernel asked for before would start the ordinary way.
            deadline = time.monotonic() + READY_TIMEOUT
            while wait and not os.path.exists(path) and zygote.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            yield {**env, "JUPYTER_PATH": os.pathsep.join(paths)}
        finally:
            stop(zygote, timeout=10)


def stop(process: subprocess.Popen, timeout: float) -> None:
    """Terminate `process`; kill it if it has not ended after `timeout` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "serve":
        serve(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "kernel":
        kernel(argv[1], argv[2:])
        return 0
    if len(argv) >= 2 and argv[0] == "run" and argv[1] == "--":
        with forked_kernels(dict(os.environ)) as env:
            return subprocess.call(argv[2:], env=env)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
