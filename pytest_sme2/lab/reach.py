"""Whether a remote xdist worker's gateway can be reached, asked before xdist opens it.

xdist opens every ``--tx`` gateway as the session starts, and one that cannot be opened (the lab's
Mac asleep, its socket server not running, the ssh host gone) stops the whole session with a
traceback. A lab session should instead go on with the machines that are there: the gateways that
cannot be reached are left out, and the devices named for them fail their cases in one line
each (``lab.schedule``). A socket gateway is asked with a TCP connection (which the socket server
takes as an empty command and forgets); an ssh gateway by running ``true`` over ssh, without a
password prompt.
"""

from __future__ import annotations

import socket
import subprocess
from typing import Any

#: how long a machine has to answer, in seconds
TIMEOUT_S = 10


def unreachable(spec: Any) -> str | None:
    """Why the execnet ``spec``'s gateway cannot be opened, in a few words; None when it can be
    (or it is no remote gateway this asks about: ``popen``, ``vagrant_ssh``)."""
    if spec.socket:
        host, _, port = str(spec.socket).rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=TIMEOUT_S):
                return None
        except (OSError, ValueError) as err:
            return f"cannot connect to {spec.socket}: {err}"
    if spec.ssh:
        command = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={TIMEOUT_S}"]
        command += ["-F", str(spec.ssh_config)] if spec.ssh_config else []
        command += [*str(spec.ssh).split(), "true"]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=3 * TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"ssh {spec.ssh}: {err}"
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            return f"ssh {spec.ssh}: {said}"
    return None
