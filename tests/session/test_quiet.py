"""The libraries' warnings stay out of a user's warnings summary; the user's own stay in it.

A real session that exports, with a model whose factory warns: that warning, the user's, must be
in the summary, and those torch, executorch and torchao raise while the plugin exports (their
deprecations once filled the emulated suite's summary, 160 times) only in the run's log. The
model's weights are seeded afresh each time, so that the session exports instead of reading the
cache: a cached program raises nothing to keep out.
"""

from __future__ import annotations

import os
import random

import pytest

from pytest_sme2.cache import cache_root
from tests.inner import INNER_TEST, REPO, SMALL_MODEL

pytest_plugins = ["pytester"]

#: A new interpreter, not a forked one: what torch and executorch warn while they are imported
#: must reach this session as it reaches a user's (tests/forked_sessions.py).
pytestmark = pytest.mark.fresh_interpreter

#: Resolved before pytester points HOME elsewhere: exports, the runner and qemu are reused.
CACHE = cache_root()

NOISY = (
    SMALL_MODEL
    + """

import os
import warnings


@register_model("noisy", inputs=small_inputs, dtypes=("fp32",))
def noisy():
    warnings.warn("the user's own warning about their model", UserWarning, stacklevel=1)
    torch.manual_seed(int(os.environ["NOISY_SEED"]))
    return Small().eval()
"""
)


def test_library_warnings_are_logged_and_the_users_own_are_summarised(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SME2_CACHE_DIR", str(CACHE))
    monkeypatch.setenv("NOISY_SEED", str(random.randrange(2**31)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(REPO), os.environ.get("PYTHONPATH", ""))))
    pytester.makeconftest(NOISY)
    pytester.makepyfile(test_noisy=INNER_TEST)
    log = pytester.path / "session.log"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--sme2-device=host",
        f"--sme2-baseline-dir={pytester.path / 'baselines'}",
        "--sme2-update-baselines",
        "-W",
        "default",
        f"--log-file={log}",
        "--log-file-level=INFO",
        timeout=900,
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    summary = out[out.index("warnings summary") :] if "warnings summary" in out else ""
    assert "the user's own warning about their model" in summary, out
    for library in ("site-packages/executorch", "site-packages/torch", "site-packages/torchao"):
        assert library not in summary, summary
    logged = log.read_text()
    assert "pytest_sme2.libraries" in logged and "site-packages/executorch" in logged, logged
