"""pytest-benchmark interop: each variant's timing-only E2E latencies become benchmark entries.

The entries are real ``pytest_benchmark`` ``Metadata`` objects fed our samples, so everything
pytest-benchmark does with its own — ``--benchmark-json``, ``--benchmark-save``/``autosave``,
``pytest-benchmark compare``, its terminal table — works on them unchanged, and its statistics
are computed by pytest-benchmark itself.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pytest_sme2.records.measurement import Measurement


def add_benchmarks(session: Any, nodeid: str, m: Measurement) -> int:
    """Append one entry per measured variant to pytest-benchmark's ``session`` (its plugin's
    ``config._benchmarksession``, None when it is not installed); returns how many.

    Nothing is added when pytest-benchmark is absent or disabled (``--benchmark-disable``, xdist),
    or when no pytest-benchmark output was asked for (``--benchmark-json``, ``--benchmark-save``,
    ``--benchmark-autosave``, ``--benchmark-compare``): the suite's own summary table is enough
    for a plain run, and pytest-benchmark's would repeat it at length.
    """
    if session is None or session.disabled:
        return 0
    if not (session.json or session.save or session.autosave or session.compare):
        return 0
    from pytest_benchmark.stats import Metadata

    name = nodeid.rsplit("::", 1)[-1]
    for variant, vm in m.variants.items():
        source: Any = SimpleNamespace(
            name=f"{name}[{variant}]",
            fullname=f"{nodeid}[{variant}]",
            group=f"sme2:{m.model}-{m.dtype}",
            param=str(variant),
            params={"variant": str(variant)},
            extra_info={
                "device": m.device.name,
                "model": m.model,
                "dtype": m.dtype,
                "threads": m.threads,
                "variant": str(variant),
                "source": "timing-only runs of the native runner (no event tracer)",
                "categories_ms": dict(vm.profile.categories_ms),
            },
            cprofile_stats=None,
            has_error=False,
        )
        entry = Metadata(source, iterations=1, options={"timer": "runner steady_clock"})
        for ms in vm.latencies_ms:
            entry.update(ms / 1000.0)  # pytest-benchmark works in seconds
        session.benchmarks.append(entry)
    return len(m.variants)
