"""The export cache key is what is exported, wherever the factory got it from.

A key of the factory's source file alone handed back the old ``.pte`` when the model's class lived
in another module, when its width came from an environment variable or its layers from a weights
file: the suite then measured the old program and passed (issue 9). These tests change each of
those and check the key, then go end to end: a user project records its baselines (on the
objects, as its session would), changes its model outside the file that registers it, and the
next run, an inner pytest session, must fail on the gate that sees the change, naming it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import executorch
import numpy as np
import pytest
import torch

from pytest_sme2 import quiet
from pytest_sme2.export import key as program_key
from pytest_sme2.export.exporter import export_model
from pytest_sme2.export.key import artifact_key, program_fingerprint
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.runner.tensors import read_tensors
from tests.inner import InnerProject
from tests.judge.host_case import host_device
from tests.judge.project_cases import judge_cases
from tests.session.contexts import project_settings

#: A user's model class, in a module of its own: 1×1 "pre" convolutions whose kernels the factory
#: reads from a weights file (one per tensor in it), then a body of 3×3 convolutions ``width``
#: wide, and a pooled linear head.
USER_NET = """
import torch


class UserNet(torch.nn.Module):
    def __init__(self, width, pre):
        super().__init__()
        self.pre = torch.nn.ModuleList(torch.nn.Conv2d(3, 3, 1, bias=False) for _ in pre)
        with torch.no_grad():
            for conv, kernel in zip(self.pre, pre):
                conv.weight.copy_(kernel)
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(width, 10)

    def forward(self, x):
        for conv in self.pre:
            x = conv(x)
        return self.head(self.body(x).mean(dim=(2, 3)))
"""

#: UserNet's class with two more convolutions in its body.
TWO_MORE_CONVS = (
    "torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU(),",
    "torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU(),\n" * 2
    + "            torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU(),",
)

#: The factory: by default the class from usernet.py, the width from $USER_NET_WIDTH, the pre
#: kernels from pre.pt. Nothing of what it builds is in this file.
FACTORY = '''
import importlib
import os
from pathlib import Path

import torch

HERE = Path(__file__).parent


def inputs(seed):
    return (torch.randn(1, 3, 48, 48, generator=torch.Generator().manual_seed(seed)),)


def user_net(module="usernet", weights="pre.pt", width="USER_NET_WIDTH"):
    """The user's net: its class (in ``module``), its width (``$width``) and its weights (the
    file ``weights``) live outside this file."""
    torch.manual_seed(0)
    net = importlib.import_module(module).UserNet
    return net(int(os.environ.get(width, "8")), torch.load(HERE / weights)).eval()
'''


def _write_project(directory: Path, *, pre: int = 1, user_net: str = USER_NET) -> None:
    """usernet.py, user_factory.py and a pre.pt of ``pre`` seeded 1×1 kernels in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "usernet.py").write_text(user_net)
    (directory / "user_factory.py").write_text(FACTORY)
    generator = torch.Generator().manual_seed(7)
    torch.save(
        [torch.randn(3, 3, 1, 1, generator=generator) / 3 for _ in range(pre)],
        directory / "pre.pt",
    )


@pytest.fixture
def load_project(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], ModelSpec]]:
    """``load(directory)``: the project in ``directory`` imported afresh, as its spec.

    Each call imports usernet and user_factory again (a new process would), and forgets the
    fingerprints computed so far, which a process keeps for as long as it lives.
    """
    saved = {name: sys.modules.get(name) for name in ("usernet", "user_factory")}

    def load(directory: Path) -> ModelSpec:
        monkeypatch.setattr(program_key, "_FINGERPRINTS", {})
        for name in saved:
            _import_as(name, directory / f"{name}.py")
        factory = sys.modules["user_factory"]
        return ModelSpec("user_net", factory.user_net, factory.inputs, "", ("fp32",))

    yield load
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


def _import_as(name: str, path: Path) -> ModuleType:
    """``path`` executed afresh as the module ``name`` (replacing an earlier import of it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --- the key sees every change of the program ---------------------------------------------------


def test_a_change_to_the_class_in_another_module_changes_the_key(
    tmp_path: Path, load_project: Callable[[Path], ModelSpec]
) -> None:
    _write_project(tmp_path / "before")
    _write_project(tmp_path / "after", user_net=USER_NET.replace(*TWO_MORE_CONVS))
    before = artifact_key(load_project(tmp_path / "before"), "fp32")
    assert artifact_key(load_project(tmp_path / "after"), "fp32") != before
    assert artifact_key(load_project(tmp_path / "before"), "fp32") == before


def test_a_changed_weights_file_changes_the_key(
    tmp_path: Path, load_project: Callable[[Path], ModelSpec]
) -> None:
    _write_project(tmp_path)
    before = artifact_key(load_project(tmp_path), "fp32")
    kernels = torch.load(tmp_path / "pre.pt")
    kernels[0][0, 0, 0, 0] += 0.25  # one weight, same shapes: only the bytes tell
    torch.save(kernels, tmp_path / "pre.pt")
    assert artifact_key(load_project(tmp_path), "fp32") != before


def test_an_environment_variable_that_widens_the_model_changes_the_key(
    tmp_path: Path, load_project: Callable[[Path], ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_project(tmp_path)
    monkeypatch.setenv("USER_NET_WIDTH", "8")
    narrow = artifact_key(load_project(tmp_path), "fp32")
    monkeypatch.setenv("USER_NET_WIDTH", "16")
    assert artifact_key(load_project(tmp_path), "fp32") != narrow


#: UserNet's forward pooling by maximum instead of mean: the same modules, weights and shapes;
#: only the traced graph tells the two programs apart.
FORWARD_ONLY = ("self.body(x).mean(dim=(2, 3))", "self.body(x).amax(dim=(2, 3))")


def test_a_forward_only_edit_of_a_traceable_model_changes_the_key_and_exports_again(
    tmp_path: Path, load_project: Callable[[Path], ModelSpec]
) -> None:
    """symbolic_trace follows UserNet, so its key holds the traced graph: an edit of ``forward``
    alone keys another program, and the next process exports it instead of taking the cached
    one, whose outputs the new model would not give."""
    _write_project(tmp_path)
    cache = tmp_path / "cache"
    before = load_project(tmp_path)
    torch.fx.symbolic_trace(before.build())  # traceable: the fx graph is what keys it
    cached = export_model(before, "fp32", cache_dir=cache)
    (tmp_path / "usernet.py").write_text(USER_NET.replace(*FORWARD_ONLY))
    after = load_project(tmp_path)  # a new process's import: nothing remembered
    old, new = before.build().state_dict(), after.build().state_dict()
    assert old.keys() == new.keys() and all(torch.equal(old[k], new[k]) for k in old)
    exported = export_model(after, "fp32", cache_dir=cache)
    assert exported.key != cached.key
    assert exported.directory != cached.directory and cached.directory.is_dir()
    # the program checked against the edited model's outputs, which are not the cached ones
    assert exported.program_error is not None and exported.program_error.ok
    (was,), (now,) = (read_tensors(a.expected_outputs) for a in (cached, exported))
    assert not np.allclose(was, now)


class _SelfAttention(torch.nn.Module):
    """Self-attention over 16 features. Its MultiheadAttention's weights have the same shapes
    for 1, 2, 4 or 8 heads, and symbolic_trace keeps it as one node: ``num_heads`` is in no
    weight, no node of the trace, no repr."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(16, heads, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.attention(x, x, x, need_weights=False)[0]


def _attention(heads: int = 2) -> Any:
    torch.manual_seed(0)
    return _SelfAttention(heads).eval()


def _attention_inputs(seed: int, heads: int = 2) -> tuple[Any, ...]:
    return (torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(seed)),)


def test_a_configuration_attribute_no_weight_shows_changes_the_key() -> None:
    two, four = (
        ModelSpec("attention", _attention, _attention_inputs, "", params=(("heads", heads),))
        for heads in (2, 4)
    )
    weights = [spec.build().state_dict() for spec in (two, four)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    assert program_fingerprint(two) != program_fingerprint(four)


def _shape_branch(scale: float) -> Callable[[], Any]:
    """A model symbolic_trace cannot follow (it branches on a shape), scaling by ``scale``."""

    class ShapeBranch(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            return self.linear(x) * scale if x.shape[-1] > 4 else x

    def build() -> Any:
        torch.manual_seed(0)
        return ShapeBranch().eval()

    return build


def _eight(seed: int) -> tuple[Any, ...]:
    return (torch.randn(1, 8, generator=torch.Generator().manual_seed(seed)),)


def test_a_model_symbolic_trace_cannot_follow_is_keyed_by_torch_export() -> None:
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(_shape_branch(2.0)())
    twice, again, thrice = (
        program_fingerprint(ModelSpec(name, _shape_branch(scale), _eight, ""))
        for name, scale in (("twice", 2.0), ("again", 2.0), ("thrice", 3.0))
    )
    assert twice == again != thrice


def test_another_executorch_version_changes_the_key(
    tmp_path: Path, load_project: Callable[[Path], ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_project(tmp_path)
    spec = load_project(tmp_path)
    installed = artifact_key(spec, "fp32")
    real = metadata.version
    monkeypatch.setattr(
        metadata, "version", lambda name: "1.99.0" if name == "executorch" else real(name)
    )
    assert artifact_key(spec, "fp32") != installed


#: Prints the key of the project in argv[1], as a fresh interpreter computes it.
KEY_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import user_factory
from pytest_sme2.export.key import artifact_key
from pytest_sme2.export.model_spec import ModelSpec
from pytest_sme2.runner.tensors import read_tensors
from tests.inner import InnerProject
from tests.judge.host_case import host_device
from tests.judge.project_cases import judge_cases
from tests.session.contexts import project_settings
spec = ModelSpec("user_net", user_factory.user_net, user_factory.inputs, "", ("fp32",))
print(artifact_key(spec, "fp32"))
"""


def test_an_unchanged_model_has_one_key_in_every_process_and_checkout(
    tmp_path: Path, load_project: Callable[[Path], ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("USER_NET_WIDTH", raising=False)
    checkouts = [tmp_path / "one", tmp_path / "elsewhere" / "two"]
    for checkout in checkouts:
        _write_project(checkout)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", KEY_SCRIPT, str(checkout)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for checkout in checkouts
    ]
    keys = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-2000:]
        keys.append(stdout.split()[-1])
    assert keys[0] == keys[1] == artifact_key(load_project(checkouts[0]), "fp32")


# --- an export is quiet about the libraries and not about the model -----------------------------


def _warning_model() -> Any:
    """A tiny conv whose factory and forward both warn: the user's warnings."""

    class Warns(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x: Any) -> Any:
            warnings.warn("the model's forward warns", UserWarning, stacklevel=1)
            return self.conv(x)

    warnings.warn("the model's factory warns", UserWarning, stacklevel=1)
    torch.manual_seed(0)
    return Warns().eval()


def _image(seed: int) -> tuple[Any, ...]:
    return (torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(seed)),)


def test_an_export_keeps_the_models_warnings_and_silences_the_libraries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = ModelSpec("warns", _warning_model, _image, "", ("int8",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_model(spec, "int8", cache_dir=tmp_path)
    shown = {(str(w.message), Path(w.filename).name) for w in caught}
    assert shown == {
        ("the model's factory warns", Path(__file__).name),
        ("the model's forward warns", Path(__file__).name),
    }
    libraries = ("torch", "executorch", "torchao")
    assert not [r for r in caplog.records if r.name.partition(".")[0] in libraries]


def _logging_model() -> Any:
    """A tiny conv whose factory logs, on a logger of its own and on the root logger."""
    logging.getLogger("user_model").info("the model's factory logs")
    logging.info("the model's factory logs on the root logger")
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()


def test_an_export_drops_the_libraries_log_records_and_keeps_the_users(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Under DEBUG capture a cold export logged the libraries' debugging (executorch's lowering
    on the root logger, the file locks, torch's trace logger): none of it reaches the capture,
    the model's own records do, and capture itself stays on. The libraries' warnings, kept out
    of the user's warnings summary, are recorded on ``pytest_sme2.libraries`` instead."""
    spec = ModelSpec("logs", _logging_model, _image, "", ("fp32",))
    with caplog.at_level(logging.DEBUG):
        export_model(spec, "fp32", cache_dir=tmp_path)
        handlers = logging.getLogger().handlers
        assert not [f for h in handlers for f in h.filters if isinstance(f, quiet.LibraryRecords)]
    libraries = [*torch.__path__, *executorch.__path__]
    # the libraries' warnings are the one thing of theirs recorded, on our own logger, once each
    ours = [r for r in caplog.records if r.name == quiet.LOG.name]
    assert all(r.levelno == logging.INFO and "Warning: " in r.getMessage() for r in ours), ours
    kept = [(r.name, r.getMessage()) for r in caplog.records if r.name != quiet.LOG.name]
    assert kept == [
        ("user_model", "the model's factory logs"),
        ("root", "the model's factory logs on the root logger"),
    ]
    assert not [r for r in caplog.records if r.pathname.startswith(tuple(libraries))]


@pytest.mark.parametrize(
    ("name", "level", "pathname", "kept"),
    [
        ("torch.__trace", logging.DEBUG, "structured.py", False),
        ("filelock", logging.DEBUG, "_api.py", False),
        ("torchao", logging.WARNING, "__init__.py", False),
        ("torch.export", logging.ERROR, "x.py", True),  # an error is worth seeing
        ("user_model", logging.DEBUG, "/project/model.py", True),
        ("root", logging.INFO, "/project/model.py", True),
        ("torchvision_user", logging.DEBUG, "/project/x.py", True),
    ],
)
def test_the_log_filter_judges_records_by_their_library(
    name: str, level: int, pathname: str, kept: bool
) -> None:
    record = logging.LogRecord(name, level, pathname, 1, "message", None, None)
    assert quiet.LibraryRecords().filter(record) is kept


def test_the_log_filter_drops_root_records_from_library_files() -> None:
    inside = os.path.join(next(iter(executorch.__path__)), "exir", "backend", "x.py")
    record = logging.LogRecord("root", logging.DEBUG, inside, 1, "graph", None, None)
    assert quiet.LibraryRecords().filter(record) is False


# --- end to end: a user project's change fails the next run -------------------------------------


#: Three models of the user's net, each reading one thing outside the registering file that the
#: test then changes: its class's module, its weights file, the variable of its width.
CONFTEST = """
from pytest_sme2 import register_model
from user_factory import inputs, user_net


@register_model("net_class", inputs=inputs, dtypes=("fp32",))
def net_class():
    return user_net(module="usernet_class")


@register_model("net_weights", inputs=inputs, dtypes=("fp32",))
def net_weights():
    return user_net(weights="pre_weights.pt")


@register_model("net_width", inputs=inputs, dtypes=("fp32",))
def net_width():
    return user_net(width="NET_WIDTH")
"""

SUITE = """
import pytest

@pytest.mark.sme2()
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
"""

#: Few runs and a 25 % latency tolerance (50 % method init), by option dest, as in test_plugin.py:
#: these run beside another xdist worker. The latency change below is ~50× the work, far beyond
#: any neighbour's noise.
FAST = {
    "sme2_runs": "20",
    "sme2_rounds": "4",
    "sme2_traced_runs": "2",
    "sme2_warmup": "2",
    "sme2_latency_tolerance": "25",
    "sme2_init_time_tolerance": "50",
}

#: The lines of the changed run's failures that must name each change, in the models' order.
CHANGED = [
    # net_class: two more 3×3 convolutions in its class's body
    "*operator structure of net_class[[]fp32] on host (sme2-off) changed from the baseline*",
    "*Convolution (NHWC, F32) IGEMM ×2 → ×4/run*",
    # net_weights: two more 1×1 convolutions in its weights file, which over 3 channels run as
    # XNNPACK GEMMs, as does the linear head
    "*operator structure of net_weights[[]fp32] on host (sme2-off) changed from the baseline*",
    "*Fully Connected (NC, F32) GEMM ×2 → ×4/run*",
    # net_width: 8 → 64 channels, ~50× the body's work
    "*E2E latency of net_width[[]fp32] on host (sme2-off) rose *%*beyond the 25% tolerance*",
]


def _record_on_the_objects(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's baselines, as its session under ``--sme2-update-baselines`` records them:
    its conftest's registrations imported here (the project importable, its modules forgotten
    afterwards), each case measured on the host and judged through ``CaseCheck`` under the
    session's options (:data:`tests.inner.INNER_DEFAULTS`' among them)."""
    monkeypatch.syspath_prepend(str(project))
    for name in ("usernet", "usernet_class", "user_factory"):
        monkeypatch.setitem(sys.modules, name, None)  # each imported afresh from the project
        del sys.modules[name]
    chosen = project_settings(
        project,
        **FAST,
        sme2_judge_disturbed=True,
        sme2_share_tolerance="100",
        sme2_device="host",
        sme2_baseline_dir=str(project / "baselines"),
        sme2_update_baselines=True,
    )
    recorded = judge_cases(project, chosen, {"host": host_device()})
    assert {case: checked.failure for case, checked in recorded.items()} == {
        f"{name}-fp32": None for name in ("net_class", "net_weights", "net_width")
    }


def test_a_change_outside_the_registering_file_fails_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user project records its baselines, then changes each model outside the file that
    registers it — a class in another module, a weights file, an environment variable — and
    the next run fails each on the gate that sees its change, naming it. The recording is on
    the objects; the run that must fail is the project's session."""
    monkeypatch.delenv("NET_WIDTH", raising=False)
    project = InnerProject(tmp_path, CONFTEST, test_suite=SUITE)
    _write_project(tmp_path)
    (tmp_path / "usernet_class.py").write_text(USER_NET)
    (tmp_path / "pre_weights.pt").write_bytes((tmp_path / "pre.pt").read_bytes())
    _record_on_the_objects(tmp_path, monkeypatch)
    stored = sorted(path.name for path in (tmp_path / "baselines" / "host").iterdir())
    assert stored == ["net_class-fp32.json", "net_weights-fp32.json", "net_width-fp32.json"]

    (tmp_path / "usernet_class.py").write_text(USER_NET.replace(*TWO_MORE_CONVS))
    torch.save(torch.load(tmp_path / "pre_weights.pt") * 3, tmp_path / "pre_weights.pt")
    flags = [f"--{dest.replace('_', '-')}={value}" for dest, value in FAST.items()]
    changed = project.run(*flags, env={"NET_WIDTH": "64"})
    changed.assert_outcomes(failed=3)
    changed.stdout.fnmatch_lines(CHANGED)


def test_a_model_that_computes_while_building_keys_the_same_on_any_thread_count() -> None:
    """mobilenet_v3_small sets its BatchNorm statistics with a forward pass while it is built;
    on two torch threads the sums ran in another order than in a forked export on one, and the
    two keyed the same program apart (the session exported it twice)."""
    import torch

    import models  # noqa: F401  (registers the examples)
    from pytest_sme2.export.key import _hash_program
    from pytest_sme2.export.model_spec import get_model

    spec = get_model("mobilenet_v3_small")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        on_two = _hash_program(spec)
        torch.set_num_threads(1)
        assert _hash_program(spec) == on_two
    finally:
        torch.set_num_threads(threads)


def _layers(depth: int = 1) -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(depth))).eval()


def _layers_inputs(seed: int, depth: int = 1) -> tuple[Any, ...]:
    return _eight(seed)


def test_the_traced_size_orders_exports_biggest_first() -> None:
    """A session starts its biggest exports first (lowering time grows with the graph), so the
    export phase does not end on one long export with the other core idle."""
    from pytest_sme2.export.key import traced_size

    small, big = (
        ModelSpec(f"sized_{depth}", _layers, _layers_inputs, "", ("fp32",), (("depth", depth),))
        for depth in (1, 6)
    )
    assert traced_size(big) > traced_size(small) > 0
    assert traced_size(ModelSpec("sized_unbuildable", _unbuildable, _eight, "")) == 0


def _unbuildable() -> Any:
    raise FileNotFoundError("weights.pt")
