"""A device lab in one session (docs/lab.md): a worker on another machine, reached through a real
execnet socket gateway, runs the cases of the device named for it (``qemu-sme2:worker=lab``)
from its own checkout, cache, baselines and temporary directory, while a local worker runs the
host's; the run directories, history records and one session report come back to the
controller, and the lab machine dying mid-session fails only its cases, one line each.

The "lab machine" is ``python -m execnet.script.socketserver`` started in another directory: a
copy of the package and the project (its checkout), another ``SME2_CACHE_DIR`` (sharing only the
provisioned qemu, runner builds and tools, as a lab machine set up once has them), another
``TMPDIR``. The socket server runs the gateway in its own process, so the lab machine's
conftest killing that process as its second case starts is the machine going away. xdist's
scheduling and a dying gateway are pytest wiring, so this is an inner session: 17–60 s on 2
cores, as other work beside it allows.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_sme2.judge.history import read_history
from pytest_sme2.lab.hooks import check_workers
from pytest_sme2.runner.build import build_runner
from tests.adb_double import configure, install, servers_seen
from tests.devices.test_device_android import _FEATURES, NO_SME2_PHONE, cpuinfo
from tests.inner import INNER_TEST, REPO, SHARED_CACHE, inner_conftest

pytest_plugins = ["pytester"]

#: the lab machine's conftest adds: it dies as its second case starts
GOES_AWAY = """

import os
import signal

import pytest


@pytest.fixture(autouse=True)
def lab_machine_goes_away(sme2_case):
    if sme2_case.model.name == "two":
        os.kill(os.getpid(), signal.SIGKILL)
"""

#: the controller's conftest adds: the phone's adb server (a lab host's) goes away as its
#: second case starts
SERVER_GOES_AWAY = """

import os
from pathlib import Path

import pytest

from tests.adb_double import configure


@pytest.fixture(autouse=True)
def phone_server_goes_away(sme2_case):
    if sme2_case.device.id.startswith("android") and sme2_case.model.name == "two":
        configure(Path(os.environ["SME2_TEST_PHONE"]), server_gone=True)
"""

#: the phone's adb server: a lab host's (the double answers for it; it listens on nothing)
PHONE_SERVER = "127.0.0.1:15039"
PHONE = f"android:server={PHONE_SERVER}:serial=PHONEA1"

#: each side collects the same tests from its own directory (no test path on the command line:
#: xdist maps an existing path to its rsync roots, and a remote worker has its own checkout)
INI = "[pytest]\ntestpaths = test_lab.py\n"


@dataclass(frozen=True)
class LabMachine:
    """A socket gateway's server in its own checkout, with its own cache and temporary dir."""

    port: int
    checkout: Path
    tmp: Path
    output: list[str]

    def controller(
        self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *models: str
    ) -> tuple[str, ...]:
        """Make ``pytester``'s directory the controller's project registering ``models``; the
        arguments of its session: a local worker and this machine's (``lab``)."""
        monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        pytester.makeconftest(inner_conftest(*models))
        pytester.makepyfile(test_lab=INNER_TEST)
        pytester.makefile(".ini", pytest=INI)
        lab = f"socket=127.0.0.1:{self.port}//id=lab//chdir={self.checkout}"
        return ("-p", "no:cacheprovider", "--tx", "popen", "--tx", lab)


@pytest.fixture
def lab_machine(tmp_path: Path) -> Iterator[LabMachine]:
    """The lab machine, serving on a port of its choosing (read from its first line)."""
    checkout, cache, tmp = tmp_path / "lab-checkout", tmp_path / "lab-cache", tmp_path / "lab-tmp"
    shutil.copytree(
        REPO / "pytest_sme2",
        checkout / "pytest_sme2",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (checkout / "conftest.py").write_text(inner_conftest("one", "two", "three") + GOES_AWAY)
    (checkout / "test_lab.py").write_text(INNER_TEST)
    (checkout / "pytest.ini").write_text(INI)
    cache.mkdir()
    tmp.mkdir()
    for provisioned in ("qemu-sme2", "runner", "tools"):  # provisioned there once, if not yet
        (SHARED_CACHE / provisioned).mkdir(parents=True, exist_ok=True)
        (cache / provisioned).symlink_to(SHARED_CACHE / provisioned)
    # and, as a machine that measured before, the reference workload exported (8 s here)
    for reference in SHARED_CACHE.glob("exports/sme2_reference-fp32-*[!k]"):
        shutil.copytree(reference, cache / "exports" / reference.name)
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "SME2_CACHE_DIR": str(cache),
        "TMPDIR": str(tmp),
        "HOME": str(tmp),
    }
    with _socket_server(checkout, env) as (port, output):
        yield LabMachine(port, checkout, tmp, output)


@contextmanager
def _socket_server(cwd: Path, env: dict[str, str]) -> Iterator[tuple[int, list[str]]]:
    """execnet's socket server in ``cwd`` with ``env``, serving on a port of its choosing (read
    from its first line): the port and its output so far; killed when the ``with`` ends, its
    output then printed (a failed test's report shows it)."""
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "execnet.script.socketserver", "127.0.0.1:0"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    first = server.stdout.readline()  # "… Entering Accept loop ('127.0.0.1', PORT)"
    found = re.search(r"'127\.0\.0\.1', (\d+)\)", first)
    output = [first]
    threading.Thread(target=lambda: output.extend(server.stdout or ()), daemon=True).start()
    try:
        assert found, first
        yield int(found[1]), output
    finally:
        server.kill()
        server.wait()
        print("socket server:", *output, sep="\n")


@pytest.fixture
def broken_machine(lab_machine: LabMachine, tmp_path: Path) -> Iterator[str]:
    """A second lab machine whose pytest cannot start (a plugin its environment names does not
    import, as after a broken upgrade): its ``--tx`` spec, ``id=broken``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(lab_machine.checkout),
        "PYTEST_PLUGINS": "no_such_plugin_7731",
        "TMPDIR": str(lab_machine.tmp),
        "HOME": str(lab_machine.tmp),
    }
    with _socket_server(tmp_path, env) as (port, _):
        yield f"socket=127.0.0.1:{port}//id=broken//chdir={lab_machine.checkout}"


def test_a_lab_worker_runs_its_device_and_the_controller_reports_it_until_it_goes_away(
    pytester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lab_machine: LabMachine,
    broken_machine: str,
) -> None:
    """``--tx popen --tx socket=…//id=lab`` with ``host,android:server=…,qemu-sme2:worker=lab``:
    the host's three cases and a phone's behind a lab host's adb server run here (the phone an
    adb double running the host runner, every call naming that server: a real adb server's
    phones are tests/devices/test_adb_server.py's), the emulated device's on the lab machine;
    its first case comes back whole (run directory, history record, a row of the one report),
    then the machine dies, and the phone's server goes away as its second case starts: the
    second and third cases of each fail in one line each naming the device and the worker or the
    server, the others pass. A third machine, ``gone`` (a port nothing listens on), is not there
    as the session starts: the device named for it fails its cases in one line each, and the
    session goes on. So does a fourth, ``broken``, whose pytest cannot start: its worker goes
    down before it collects (xdist's replacement used to wait for ever on its server)."""
    controller = lab_machine.controller(pytester, monkeypatch, "one", "two", "three")
    (pytester.path / "conftest.py").write_text(
        (pytester.path / "conftest.py").read_text() + SERVER_GOES_AWAY
    )
    phone = install(
        tmp_path / "phone",
        serial="PHONEA1",
        cpuinfo=cpuinfo(8, _FEATURES),
        properties=NO_SME2_PHONE,
    )
    configure(tmp_path / "phone", server=PHONE_SERVER)
    monkeypatch.setenv("SME2_TEST_PHONE", str(tmp_path / "phone"))
    artifacts, history, junit = tmp_path / "artifacts", tmp_path / "history", tmp_path / "j.xml"
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        result = pytester.runpytest_subprocess(
            *controller,
            "--tx",
            f"socket=127.0.0.1:{closed.getsockname()[1]}//id=gone",
            "--tx",
            broken_machine,
            f"--sme2-device=host,{PHONE},qemu-sme2:worker=lab,host:worker=gone,host:worker=broken",
            f"--sme2-adb={phone}",
            f"--sme2-runner-on={build_runner('host')}",
            "--sme2-update-baselines",
            f"--sme2-artifacts={artifacts}",
            f"--sme2-history={history}",
            f"--junitxml={junit}",
            f"--html={tmp_path / 'html' / 'report.html'}",
            timeout=300,  # 17–60 s; a session that hangs on a worker fails in 5 min, not 15
        )
    result.assert_outcomes(passed=5, failed=8, errors=2)  # the phone is lost in its set-up
    ended = {}
    for case in ET.parse(junit).iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        ended[case.get("name", "").split("]@")[0] + "]"] = (
            "passed" if failure is None else failure.get("message", "")
        )
    for model in ("one", "two", "three"):
        assert ended[f"test_model[host-{model}-fp32]"] == "passed"
    assert ended[f"test_model[{PHONE}-one-fp32]"] == "passed"
    assert set(servers_seen(tmp_path / "phone")) == {PHONE_SERVER}  # every adb call named it
    gone = f"adb server {PHONE_SERVER} cannot be reached (adb: cannot connect to daemon"
    for model, says in (("two", gone), ("three", f"{PHONE} was lost earlier in this session: ")):
        said = ended[f"test_model[{PHONE}-{model}-fp32]"]
        assert says in said and "\n" not in said, said
    assert ended["test_model[qemu-sme2:worker=lab-one-fp32]"] == "passed"
    lost = "qemu-sme2:worker=lab: the xdist worker 'lab' that runs its cases went away ("
    for model, tail in (("two", ") while running it"), ("three", ")")):
        said = ended[f"test_model[qemu-sme2:worker=lab-{model}-fp32]"]
        assert lost in said and said.rstrip('"').endswith(tail) and "\n" not in said, said
    absent = "host:worker=gone: the xdist worker 'gone' that runs its cases was not there (cannot "
    for model in ("one", "two", "three"):
        said = ended[f"test_model[host:worker=gone-{model}-fp32]"]
        assert absent in said and "Connection refused" in said and "\n" not in said, said
    broken = "host:worker=broken: the xdist worker 'broken' that runs its cases was not there ("
    for model in ("one", "two", "three"):
        said = ended[f"test_model[host:worker=broken-{model}-fp32]"]
        assert broken in said and "no_such_plugin_7731" in said and "\n" not in said, said

    # the lab's case came back: its run directory here (written there, in its own tmp)
    here = artifacts / "qemu-sme2@worker=lab" / "one-fp32"
    assert (here / "manifest.json").is_file() and (here / "sme2_report.md").is_file()
    (there,) = lab_machine.tmp.glob("pytest-sme2-lab-*/artifacts/qemu-sme2@worker=lab/one-fp32")
    assert sorted(p.name for p in here.iterdir()) == sorted(p.name for p in there.iterdir())
    # one report: a row per device in "Across devices", every link to a file here
    report = (artifacts / "report.md").read_text()
    across = report.split("## Across devices", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in across.splitlines() if line.startswith("| ")][2:]
    assert sorted(line.split(" | ")[2] for line in rows) == [
        PHONE,
        *["host"] * 3,
        "qemu-sme2:worker=lab",
    ], across
    links = re.findall(r"\]\(([^)#]+)\)", report)
    assert any("qemu-sme2@worker=lab" in link for link in links)
    assert all((artifacts / link).exists() for link in links if "://" not in link), links
    # and the HTML report's links to its files, made there, lead to the copies here
    page = (tmp_path / "html" / "report.html").read_text()
    href = r"href=\\&#34;([^&\\]*qemu-sme2@worker=lab/one-fp32/[^&\\]+)"  # pytest-html's JSON
    made_there = set(re.findall(href, page))
    assert made_there, page
    for link in made_there:
        target = (tmp_path / "html" / link).resolve()
        assert target.is_relative_to(here) and target.exists(), link
    # its history record, in a file of the lab worker's, pointing here
    found = read_history(history)
    (record,) = [r for r in found.records if r.device == "qemu-sme2:worker=lab"]
    assert record.artifacts == here and record.measurement.variants
    assert all(vm.etdump.is_relative_to(here) for vm in record.measurement.variants.values())
    assert (history / "index.html").is_file()
    # the lost cases are the report's cases not measured, each with its line
    for model in ("two", "three"):
        assert f"test_model[qemu-sme2:worker=lab-{model}-fp32]@qemu-sme2:worker=lab" in report
    # each side keeps its own baselines, by device (the worker is where, not what)
    assert (lab_machine.checkout / "baselines" / "qemu-sme2" / "one-fp32.json").is_file()
    assert sorted(p.name for p in (pytester.path / "baselines").iterdir()) == [
        "android@server=127.0.0.1@15039@serial=PHONEA1",
        "host",
    ]


@pytest.mark.parametrize("tx", [("--tx", "popen", "--tx", "socket=lab:8888//id=lab"), ()])
def test_a_worker_no_tx_gives_is_a_usage_error_naming_the_device(
    pytester: pytest.Pytester, tx: tuple[str, ...]
) -> None:
    """A fleet that names a worker ``--tx`` does not give stops before any gateway is opened; so
    does one in a session without xdist's workers (its Mac's cases would run here)."""
    config = pytester.parseconfig(*tx, "--sme2-device=mac:worker=mini1,host")
    with pytest.raises(pytest.UsageError) as error:
        check_workers(config)
    assert str(error.value).startswith(
        "--sme2-device: mac:worker=mini1 names the xdist worker 'mini1', which no --tx gives"
    )
    check_workers(pytester.parseconfig(*tx, "--sme2-device=mac,host"))  # none named: no error


def test_a_lab_of_named_workers_only_leaves_the_other_devices_nowhere(
    pytester: pytest.Pytester,
) -> None:
    """The host's cases run on the workers no device names: with none, a usage error."""
    config = pytester.parseconfig(
        "--tx", "ssh=ci@lab-mini-1//id=mini1", "--sme2-device=mac:worker=mini1,host"
    )
    with pytest.raises(pytest.UsageError) as error:
        check_workers(config)
    assert str(error.value) == (
        "--sme2-device: host run on the workers no device names, and every --tx is named for "
        "one: add --tx popen"
    )


def test_a_lab_machine_whose_checkout_differs_is_a_collection_error_and_nothing_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, lab_machine: LabMachine
) -> None:
    """A lab machine at another commit (here: a model more) would measure other code: xdist's
    collection error names the difference, and the session measures nothing."""
    controller = lab_machine.controller(pytester, monkeypatch, "one")
    (lab_machine.checkout / "conftest.py").write_text(inner_conftest("one", "four"))
    result = pytester.runpytest_subprocess(
        *controller, "--sme2-device=host,qemu-sme2:worker=lab", timeout=300
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            # whichever worker collected first is named first, and its list is the diff's "-"
            "Different tests were collected between * and *. The difference is:",
            "[+-]test_lab.py::test_model[[]qemu-sme2:worker=lab-four-fp32[]]@qemu-sme2:worker=lab",
        ],
        consecutive=False,
    )
