"""Build the native runner once per (source, executorch wheel, target, compiler) and cache it.

Why cached and keyed this way: every test of every model needs the runner, builds cost seconds,
and a binary linked against one wheel must never run against another (the runtime and the program
schema move together). The key hashes everything that changes the binary; pytest-xdist workers
asking for the same key wait on one build (see :func:`pytest_sme2.cache.cached_dir`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import time
from pathlib import Path

from pytest_sme2 import progress
from pytest_sme2.cache import cache_root, cached_dir, content_key, write_atomic
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.runner.invoke import ANSWER_TIMEOUT_S, run_step

RUNNER_SOURCE_DIR = Path(__file__).resolve().parent
"""Where ``sme2_runner.cpp``, ``CMakeLists.txt`` and the toolchain files live."""

BINARY_NAME = "sme2_runner"
MIN_CMAKE = (3, 28)

_SOURCE_FILES = ("sme2_runner.cpp", "CMakeLists.txt", "aarch64-linux-gnu.cmake")
# target -> (toolchain file or None for the host, C++ compiler command when $CXX does not say)
_TARGETS: dict[str, tuple[str | None, str]] = {
    "host": (None, "c++"),
    "aarch64": ("aarch64-linux-gnu.cmake", "aarch64-linux-gnu-g++"),
}
_COMPILER_PACKAGES = {"host": "g++", "aarch64": "g++-aarch64-linux-gnu"}
# A configure takes seconds, a runner build 1–3 minutes on 2 cores (benchmarks/runner_build.py):
# each stage's deadline leaves room for a loaded machine, not for a hang.
_CONFIGURE_TIMEOUT_S = 300
_BUILD_TIMEOUT_S = 900
# Build-tool lines that only say that something else failed.
_MAKE_NOISE = re.compile(r"^(g?make(\[\d+\])?: \*\*\*|ninja: build stopped)")


def executorch_package_dir() -> Path:
    """The ``executorch`` directory of the installed wheel (found without importing it)."""
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise RunnerError('executorch is not installed: pip install "pytest-sme2[export]"')
    return Path(next(iter(spec.submodule_search_locations)))


def executorch_version(executorch_dir: Path | None = None) -> str:
    """The full build version of a wheel's ``executorch`` directory, e.g. ``1.5.1+cpu``.

    Read from files rather than package metadata, so it also works for a wheel that was only
    unpacked (the aarch64 one used for cross builds).
    """
    root = executorch_dir or executorch_package_dir()
    sources = (
        (
            root / "share/cmake/executorch-config-version.cmake",
            r'EXECUTORCH_BUILD_VERSION\s+"([^"]+)"',
        ),
        (root / "version.py", r'__version__\s*=\s*"([^"]+)"'),
    )
    for path, pattern in sources:
        if path.is_file() and (match := re.search(pattern, path.read_text(errors="replace"))):
            return match.group(1)
    raise RunnerError(
        f"{root}: cannot tell the executorch version (no version.py, no CMake config)"
    )


def find_cmake() -> Path:
    """A CMake >= 3.28: the PyPI ``cmake`` package's, else the one on PATH."""
    candidates: list[Path] = []
    try:
        import cmake  # the PyPI package; importing it only locates its binaries

        candidates.append(Path(cmake.CMAKE_BIN_DIR) / "cmake")
    except ImportError:
        pass
    if on_path := shutil.which("cmake"):
        candidates.append(Path(on_path))
    seen = []
    for candidate in candidates:
        version = _cmake_version(candidate)
        if version is not None and version >= MIN_CMAKE:
            return candidate
        seen.append(f"{candidate} {'.'.join(map(str, version or ())) or '(unusable)'}")
    found = f" (found {', '.join(seen)})" if seen else ""
    raise RunnerError(f'the runner build needs CMake >= 3.28{found}: pip install "cmake>=3.28"')


def build_key(
    target: str = "host",
    *,
    executorch_dir: Path | None = None,
    source_dir: Path = RUNNER_SOURCE_DIR,
) -> str:
    """The cache key of a runner build: sources, wheel identity, target and compiler version."""
    _check_target(target)
    package = _package_dir(target, executorch_dir)
    parts: list[str | bytes] = [target, _compiler_version(target)]
    parts += [(source_dir / name).read_bytes() for name in _SOURCE_FILES]
    parts += [executorch_version(package), _wheel_fingerprint(package)]
    return content_key(*parts)


def build_runner(
    target: str = "host",
    *,
    executorch_dir: Path | None = None,
    source_dir: Path = RUNNER_SOURCE_DIR,
) -> Path:
    """The runner binary for ``target`` (``host`` or ``aarch64``), built on first use.

    ``executorch_dir`` is the ``executorch`` directory of the wheel to build against: the
    installed one by default (host only); a cross build needs an unpacked aarch64 wheel.
    ``source_dir`` holds the runner sources (another directory only to try a modified runner).
    """
    package = _package_dir(target, executorch_dir)
    key = build_key(target, executorch_dir=package, source_dir=source_dir)
    entry = cache_root() / "runner" / f"{target}-{key}"
    cached_dir(entry, lambda tmp: _build(tmp, target, package, source_dir, entry))
    return entry / BINARY_NAME


def _check_target(target: str) -> None:
    if target not in _TARGETS:
        raise ConfigError(f"unknown runner target {target!r}: expected one of {sorted(_TARGETS)}")


def _package_dir(target: str, executorch_dir: Path | None) -> Path:
    _check_target(target)
    if executorch_dir is None:
        if target != "host":
            raise ConfigError(
                f"a {target} runner needs executorch_dir: the executorch directory of an "
                f"unpacked {target} executorch wheel"
            )
        executorch_dir = executorch_package_dir()
    config = executorch_dir / "share/cmake/executorch-config.cmake"
    if not config.is_file():
        raise RunnerError(
            f"{executorch_dir}: not an executorch package directory (no {config.name} under "
            "share/cmake)"
        )
    return executorch_dir.resolve()


def _compiler(target: str) -> str:
    default = _TARGETS[target][1]
    return os.environ.get("CXX", default) if target == "host" else default


def _compiler_version(target: str) -> str:
    compiler = _compiler(target)
    try:
        command = [compiler, "--version"]
        result = run_step(command, shlex.join(command), timeout_s=ANSWER_TIMEOUT_S)
        if result.returncode != 0:
            raise RunnerError(f"{compiler} --version failed (exit {result.returncode})")
    except RunnerError as err:
        raise RunnerError(
            f"no working C++ compiler {compiler!r} for the {target} runner: "
            f"apt-get install {_COMPILER_PACKAGES[target]} ({err})"
        ) from None
    return result.stdout.strip().splitlines()[0] if result.stdout.strip() else compiler


def _wheel_fingerprint(package: Path) -> str:
    """Names, sizes and mtimes of the wheel's libraries and CMake files: a reinstall changes it."""
    return files_fingerprint(
        sorted([*(package / "lib").glob("*.so*"), *(package / "share/cmake").glob("*.cmake")])
    )


def files_fingerprint(files: list[Path]) -> str:
    """Each file's name, size and mtime, one per line: what a reinstall of a package changes,
    without reading its (hundreds of MB of) libraries."""
    entries = []
    for path in files:
        stat = path.stat()
        entries.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return "\n".join(entries)


def _cmake_version(cmake: Path) -> tuple[int, ...] | None:
    try:
        command = [str(cmake), "--version"]
        result = run_step(command, shlex.join(command), timeout_s=ANSWER_TIMEOUT_S)
    except RunnerError:
        return None
    match = re.search(r"cmake version (\d+)\.(\d+)", result.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _build(out: Path, target: str, package: Path, source_dir: Path, entry: Path) -> None:
    """Configure and build into ``out/build``, keep only the binary, the log and a manifest."""
    cmake = find_cmake()
    build_dir = out / "build"
    configure = [
        str(cmake),
        "-S",
        str(source_dir),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DEXECUTORCH_PACKAGE_DIR={package}",
    ]
    toolchain = _TARGETS[target][0]
    if toolchain is None:
        configure.append(f"-DCMAKE_CXX_COMPILER={_compiler(target)}")
    else:
        configure.append(f"-DCMAKE_TOOLCHAIN_FILE={source_dir / toolchain}")
    build = [str(cmake), "--build", str(build_dir), "--parallel", "2"]
    log: list[str] = []
    start = time.perf_counter()
    with progress.task(f"build {target} runner") as running:  # 1–3 minutes: say so
        for stage, command, timeout_s in (
            ("configure", configure, _CONFIGURE_TIMEOUT_S),
            ("build", build, _BUILD_TIMEOUT_S),
        ):
            running.stage(stage)
            log.append("$ " + " ".join(command))
            result = run_step(command, f"{stage} of the {target} runner", timeout_s=timeout_s)
            log += [result.stdout, result.stderr]
            if result.returncode != 0:
                failed_log = entry.with_name(entry.name + ".failed.log")
                write_atomic(failed_log, "\n".join(log))
                raise RunnerError(
                    f"{stage} of the {target} runner failed (exit {result.returncode}): "
                    f"{_error_tail(result.stdout + result.stderr)}; full log: {failed_log}"
                )
    seconds = time.perf_counter() - start
    shutil.copy2(build_dir / BINARY_NAME, out / BINARY_NAME)
    shutil.rmtree(build_dir)
    write_atomic(out / "build.log", "\n".join(log))
    manifest = {
        "target": target,
        "executorch_dir": str(package),
        "executorch_version": executorch_version(package),
        "compiler": _compiler_version(target),
        "cmake": str(cmake),
        "build_seconds": round(seconds, 3),
    }
    write_atomic(out / "build.json", json.dumps(manifest, indent=2) + "\n")


def _error_tail(output: str, lines: int = 4) -> str:
    """One line for the message: from the first error on (CMake's reason follows its ``CMake
    Error`` line, a compiler's context its ``error:``), else the last lines of the output."""
    text = [
        line.strip()
        for line in output.splitlines()
        if line.strip() and not _MAKE_NOISE.match(line.strip())
    ]
    first = next((i for i, line in enumerate(text) if "error" in line.lower()), None)
    picked = text[first : first + lines] if first is not None else text[-lines:]
    return " | ".join(picked) or "(no output)"
