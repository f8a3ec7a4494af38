"""tools/kernel_zygote.py: the kernels nbval and the live tests start are forks of one process.

A fork must be the kernel Jupyter asked for (its folder, its environment), already holding the
zygote's imports; interrupts reach it; it ends with the process Jupyter started; and with no
zygote the kernel is an ordinary one.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import kernel_zygote  # tools/ (on sys.path: conftest.py)
import pytest
from jupyter_client.manager import KernelManager

PROBE = "import os, sys; print(os.getcwd(), os.environ.get('ZYGOTE_PROBE'), 'torch' in sys.modules)"


def start(env: dict[str, str], cwd: Path, monkeypatch) -> tuple[KernelManager, object]:
    """Jupyter's python3 kernel, started as nbval starts it (in `cwd`, with `env`, whose
    JUPYTER_PATH says where the kernel's spec is: read by the process that starts it)."""
    monkeypatch.setenv("JUPYTER_PATH", env["JUPYTER_PATH"])
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(cwd), env=env)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return manager, client


def run(client, code: str, timeout: float = 30) -> tuple[str, str | None]:
    """(what the code printed or returned, the name of the error it raised or None)."""
    printed, error = [], None

    def on_output(message):
        nonlocal error
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "execute_result":
            printed.append(message["content"]["data"]["text/plain"])
        elif message["msg_type"] == "error":
            error = message["content"]["ename"]

    # Just after an error, ipykernel aborts the requests that reach it (stop_on_error, as any
    # kernel does on a busy machine): such a request is sent again.
    for _ in range(50):
        reply = client.execute_interactive(code, timeout=timeout, output_hook=on_output)
        if reply["content"]["status"] != "aborted":
            break
        time.sleep(0.1)
    return "".join(printed).strip(), error


@pytest.fixture(scope="module")
def zygote_env():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with kernel_zygote.forked_kernels(env) as forked:
        yield forked


@pytest.mark.slow  # a zygote (imports torch) and three kernels
def test_a_forked_kernel_is_the_kernel_jupyter_asked_for(zygote_env, tmp_path, monkeypatch):
    manager, client = start({**zygote_env, "ZYGOTE_PROBE": "yes"}, tmp_path, monkeypatch)
    try:
        printed, error = run(client, PROBE)
        assert error is None
        assert printed == f"{tmp_path} yes True"  # its folder and environment; torch preloaded
        forked, _ = run(client, "print(os.getpid())")
        started = manager.provisioner.process.pid  # the process Jupyter started: the client
        assert int(forked) != started

        # An interrupt reaches the fork: a long cell stops with KeyboardInterrupt.
        client.execute("import time; time.sleep(30)")
        time.sleep(1.0)
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=10)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert run(client, "1 + 1") == ("2", None)  # and it goes on

        # Killed as Jupyter kills a kernel (its process, with SIGKILL): the fork ends too.
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(int(forked), 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(int(forked), signal.SIGKILL)
            pytest.fail("the fork outlived the kernel process Jupyter killed")
    finally:
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)


@pytest.mark.slow
def test_without_a_zygote_the_kernel_is_an_ordinary_one(tmp_path, monkeypatch):
    spec = tmp_path / "spec"
    kernel_zygote.kernelspec(spec, str(tmp_path / "nobody.sock"))  # nothing listens there
    env = {**os.environ, "JUPYTER_PATH": str(spec), "ZYGOTE_PROBE": "plain"}
    manager, client = start(env, tmp_path, monkeypatch)
    try:
        assert manager.kernel_spec.argv[1].endswith("kernel_zygote.py")  # our spec, no zygote
        assert run(client, PROBE) == (f"{tmp_path} plain False", None)  # no torch imported
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
