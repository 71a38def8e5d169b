"""Whether a remote worker's gateway answers, asked as xdist would open it: a real socket that
listens, one that refuses, an ssh host that does not resolve (ssh's own message)."""

from __future__ import annotations

import shutil
import socket

from execnet import XSpec

from pytest_sme2.lab.reach import unreachable


def test_a_socket_gateway_answers_where_something_listens_and_is_refused_where_not() -> None:
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        closed.bind(("127.0.0.1", 0))
        port, refused = listening.getsockname()[1], closed.getsockname()[1]
        assert unreachable(XSpec(f"socket=127.0.0.1:{port}//id=lab")) is None
        said = unreachable(XSpec(f"socket=127.0.0.1:{refused}//id=lab"))
    assert said is not None and said.startswith(f"cannot connect to 127.0.0.1:{refused}: ")
    assert "Connection refused" in said
    assert unreachable(XSpec("popen//id=gw0")) is None  # a local worker is not asked


def test_an_ssh_gateway_whose_host_does_not_resolve_says_what_ssh_said() -> None:
    """ssh's last line of complaint (``Could not resolve hostname …``), or, on a machine without
    an ssh client, that it could not be started: either way the worker is left out."""
    said = unreachable(XSpec("ssh=ci@lab-mini-1.invalid//id=mini1"))
    assert said is not None and said.startswith("ssh ci@lab-mini-1.invalid: ")
    if shutil.which("ssh"):
        assert "lab-mini-1.invalid" in said.removeprefix("ssh ci@lab-mini-1.invalid: "), said
