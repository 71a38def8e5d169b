"""Fixtures shared by the test modules that need them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sme2 import progress
from pytest_sme2.devices.qemu import QemuSme2Device
from tests.forked_sessions import forked_popen
from tests.inner import INNER_DEFAULTS, SHARED_CACHE, SPARED_PLUGINS, XDIST_WORKER_ENV
from tests.llm_programs import RecordedProject, exported_llm_programs, recorded_project
from tests.skip_policy import register as register_skip_policy

#: The skips this suite expects, each a platform's (tests/skip_policy.py fails on any other).
PLATFORM_SKIPS = Path(__file__).with_name("platform_skips.toml")


def pytest_configure(config: pytest.Config) -> None:
    """Skips are listed or fail the session (:mod:`tests.skip_policy`)."""
    register_skip_policy(config, PLATFORM_SKIPS)


#: Fixtures of the tests that take seconds, not milliseconds: a pytest session of their own, or
#: qemu-sme2's emulated runs.
LONG_FIXTURES = frozenset(
    {
        "pytester",
        "qemu_device",
        "stored_qemu_device",
        "narrow_qemu_device",
        "narrow_stored_qemu_device",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first, each kind in its file order: xdist deals the tests in this order (a
    group's at its first test's place, the biggest groups first), so the run ends on short tests
    and both workers finish together. In file order, one warm `.ci/run` ended on a 16 s inner
    session with the other worker idle for 12 s; replayed with that run's durations, greedy
    dealing ends 305.3 s in file order and 301.3 s long-first (the longest-first optimum: 301.3)."""
    items.sort(key=lambda item: LONG_FIXTURES.isdisjoint(item.fixturenames))


@pytest.fixture(scope="session")
def operator_libraries_imported() -> None:
    """The libraries an in-process export imports, which register torch operator libraries and
    cache artifacts in C++: imported once per process, quietly (their import warnings are the
    libraries', :func:`pytest_sme2.quiet.quiet_libraries`)."""
    from pytest_sme2.quiet import quiet_libraries

    with quiet_libraries():
        import executorch.backends.xnnpack.partition.xnnpack_partitioner
        import executorch.devtools
        import executorch.exir  # noqa: F401
        import torchao.quantization  # noqa: F401


@pytest.fixture
def own_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's own progress (:mod:`pytest_sme2.progress`): the exports it finishes and the
    tasks it runs are its own, not the running session's (whose summary must not list them),
    and say nothing on that session's terminal."""
    monkeypatch.setattr(progress, "_SINK", None)
    monkeypatch.setattr(progress, "_FINISHED", [])


def _qemu(**options: object) -> QemuSme2Device:
    """The qemu-sme2 device as the plugin builds it from these options (by dest), provisioned
    (cached)."""
    prepared = QemuSme2Device.from_options(options.get)
    prepared.prepare()
    return prepared


@pytest.fixture(scope="session")
def qemu_device() -> QemuSme2Device:
    """The qemu-sme2 device as the plugin builds it under ``--sme2-recount``, provisioned
    (cached): the tests that take it are of counting, so it counts every run."""
    return _qemu(sme2_recount=True)


@pytest.fixture(scope="session")
def stored_qemu_device() -> QemuSme2Device:
    """The qemu-sme2 device as a session builds it: a variant counted before (by a test, or by the
    example suite on qemu-sme2 in the same cache) is read back from the store, whose key holds
    everything a count is a function of. For tests of what a count *shows* (shares, kernels),
    not of counting itself; those take :func:`qemu_device`."""
    return _qemu()


#: The narrowest SME vector length qemu-sme2 takes, in bytes (128-bit SVL).
NARROW_VL = "16"


@pytest.fixture(scope="session")
def narrow_qemu_device() -> QemuSme2Device:
    """:func:`qemu_device` at the narrowest SME vector length, for tests of counting and of the
    runner under emulation whose subject does not depend on the vector length (none compares its
    counts with a committed baseline, all recorded at 512 bits). qemu emulates SME2's tile
    instructions in helpers whose work grows with the tile: toy_cnn's SME2-on inference takes
    0.5 s at 128 bits and 4.7 s at 512 on the 2.3 GHz Xeon VM, and runs the same KleidiAI SME2
    kernels (MOPA convolutions, an MLA GEMM) at both."""
    return _qemu(sme2_recount=True, sme2_qemu_vl=NARROW_VL)


@pytest.fixture(scope="session")
def narrow_stored_qemu_device() -> QemuSme2Device:
    """:func:`stored_qemu_device` at :func:`narrow_qemu_device`'s vector length: the store's
    counts beside counts made now, at one length."""
    return _qemu(sme2_qemu_vl=NARROW_VL)


@pytest.fixture(scope="session")
def llm_programs() -> Path:
    """The two programs ExecuTorch's LLM exporter made (:mod:`tests.llm_programs`): exported
    once per exporter version, in the shared cache."""
    return exported_llm_programs()


@pytest.fixture(scope="session")
def llm_project(
    llm_programs: Path, qemu_device: QemuSme2Device, tmp_path_factory: pytest.TempPathFactory
) -> RecordedProject:
    """A user's project of both programs, recorded by its session on the host and qemu-sme2
    (provisioned), then judged again unchanged on the objects
    (:func:`tests.llm_programs.recorded_project`): for tests/e2e/test_program.py and
    tests/e2e/test_custom_ops.py, which run on one xdist worker."""
    return recorded_project(tmp_path_factory.mktemp("llm-project"), llm_programs)


@pytest.fixture(scope="session", autouse=True)
def inner_sessions_spare_plugins() -> Iterator[None]:
    """Every pytest a test starts as a subprocess (not only pytester's) skips
    :data:`SPARED_PLUGINS`: set in this worker's environment once its own session is running,
    in place of the outer session's own ``PYTEST_ADDOPTS`` (``--durations`` for a CI log is no
    option of the sessions its tests start, as pytester's are not)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTEST_ADDOPTS", " ".join(SPARED_PLUGINS))
        yield


@pytest.fixture
def pytester(
    operator_libraries_imported: None,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> pytest.Pytester:
    """pytest's ``pytester``, whose inner sessions judge time even where other work took the CPU
    and share the suite's cache (:data:`SHARED_CACHE`; a test about an empty cache sets its own).

    This suite runs on two xdist workers on two cores: a measurement here shares the machine
    with the other worker's exports by design, so the default — time not judged when the runs
    lost the CPU — would make every time-gate test a coin toss. The rule itself is tested where
    it is the subject (tests/measure/test_disturbance.py), which takes this away. Set after
    pytester's own set-up, which clears ``PYTEST_ADDOPTS``. Its ``runpytest_subprocess`` sessions
    are forked from a server that has imported torch (:mod:`tests.forked_sessions`), except for a
    test marked ``fresh_interpreter`` (one about what importing the libraries does).

    And only once the libraries of an in-process export are imported
    (:func:`operator_libraries_imported`): pytester drops the modules a test imported from
    ``sys.modules`` when it ends, and importing them again registers again and fails ("Only a
    single TORCH_LIBRARY …", "… already registered"). From an empty cache a pytester test came
    first on a worker, and every in-process export there failed after.

    And without this worker's xdist variables (:data:`tests.inner.XDIST_WORKER_ENV`): an inner
    session of one process is one, not a worker.
    """
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(INNER_DEFAULTS))
    monkeypatch.setenv("SME2_CACHE_DIR", str(SHARED_CACHE))
    for name in XDIST_WORKER_ENV:
        monkeypatch.delenv(name, raising=False)
    if request.node.get_closest_marker("fresh_interpreter") is None:
        monkeypatch.setattr(pytester, "popen", forked_popen(pytester.popen))
    return pytester
