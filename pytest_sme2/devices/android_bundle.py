"""What an ``android`` device needs pushed and built beside the user's runner: the shared
libraries it loads (its ``DT_NEEDED`` entries, found as the dynamic linker would), the NDK's
clang and ``libc++_shared.so``, and the SME2-off shim for bionic.

Apart from :mod:`pytest_sme2.devices.android` because none of it needs a device: ELF files, an
NDK and a compiler on the host, tested without a phone.
"""

from __future__ import annotations

import shlex
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.cache import cache_root, cached_dir, content_key
from pytest_sme2.devices.provision import SHIM_SOURCE
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.runner.invoke import run_step, runner_tail

NDK_ENV = "ANDROID_NDK"
ANDROID_API = 28
#: Building the sme2-off shim with the NDK's clang: one small C file.
_COMPILE_TIMEOUT_S = 120

# Forwards glibc's name for the real getauxval, which hide_sme.c calls, to bionic's.
_BIONIC_BRIDGE = """\
#include <dlfcn.h>
unsigned long __getauxval(unsigned long type) {
    static unsigned long (*next)(unsigned long);
    if (next == 0) next = (unsigned long (*)(unsigned long))dlsym(RTLD_NEXT, "getauxval");
    return next(type);
}
"""
# Libraries every Android process gets from the system: never pushed.
_SYSTEM_LIBRARIES = frozenset(
    {"libc.so", "libm.so", "libdl.so", "liblog.so", "libandroid.so", "libz.so", "ld-android.so"}
)


@dataclass(frozen=True)
class ElfDependencies:
    needed: tuple[str, ...]
    search_path: tuple[str, ...]  # DT_RUNPATH (else DT_RPATH) entries, ``$ORIGIN`` unexpanded


def elf_dependencies(path: Path) -> ElfDependencies:
    """``DT_NEEDED`` and ``DT_RUNPATH``/``DT_RPATH`` of a 64-bit little-endian ELF file (what
    ``readelf -d`` shows), read directly: no binutils for the target needed on the host."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the runner ({err.strerror})") from err
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ConfigError(f"{path}: not a 64-bit little-endian ELF executable")
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == 1:  # PT_LOAD
            loads.append((p_offset, p_vaddr, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return ElfDependencies((), ())  # static: nothing to push but itself
    entries = [struct.unpack_from("<qQ", data, at) for at in range(dynamic[0], sum(dynamic), 16)]
    strtab_vaddr = next(value for tag, value in entries if tag == 5)  # DT_STRTAB
    strtab = next(o + strtab_vaddr - v for o, v, n in loads if v <= strtab_vaddr < v + n)

    def string(offset: int) -> str:
        start = strtab + offset
        return data[start : data.index(b"\0", start)].decode()

    needed = tuple(string(value) for tag, value in entries if tag == 1)
    runpath = [string(value) for tag, value in entries if tag == 29]
    rpath = [string(value) for tag, value in entries if tag == 15]
    search = ":".join(runpath or rpath)
    return ElfDependencies(needed, tuple(part for part in search.split(":") if part))


def runner_libraries(
    runner: Path, *, extra_dirs: Iterable[Path] = ()
) -> tuple[dict[str, Path], tuple[str, ...]]:
    """The shared libraries ``runner`` needs that are not the system's, found as the dynamic
    linker would (beside it, its RUNPATH with ``$ORIGIN``, then ``extra_dirs``), recursively.

    Returns the libraries found (name -> path) and the names found nowhere (system libraries
    such as ``libc.so`` or ``libstdc++.so.6`` on a glibc host, or missing ones).
    """
    found: dict[str, Path] = {}
    missing: list[str] = []
    queue = [runner]
    while queue:
        binary = queue.pop()
        deps = elf_dependencies(binary)
        origin = str(binary.resolve().parent)
        dirs = [binary.resolve().parent]
        dirs += [Path(entry.replace("$ORIGIN", origin)) for entry in deps.search_path]
        dirs += list(extra_dirs)
        for name in deps.needed:
            if name in found or name in missing or name in _SYSTEM_LIBRARIES:
                continue
            path = next((d / name for d in dirs if (d / name).is_file()), None)
            if path is None:
                missing.append(name)
            else:
                found[name] = path.resolve()
                queue.append(path)
    return found, tuple(missing)


def ndk_clang(ndk: Path) -> Path:
    """The NDK's clang (any host tag), or ConfigError naming the NDK directory."""
    candidates = sorted(ndk.glob("toolchains/llvm/prebuilt/*/bin/clang"))
    if not candidates:
        raise ConfigError(
            f"{NDK_ENV}={ndk}: no toolchains/llvm/prebuilt/*/bin/clang; point it at an "
            "Android NDK (r26 or newer)"
        )
    return candidates[0]


def ndk_libcxx(ndk: Path) -> Path | None:
    """The NDK's arm64 ``libc++_shared.so``, which runners built with the NDK's STL need."""
    pattern = "toolchains/llvm/prebuilt/*/sysroot/usr/lib/aarch64-linux-android/libc++_shared.so"
    return next(iter(sorted(ndk.glob(pattern))), None)


def shim_compile_command(clang: Path, out: Path, bridge: Path) -> list[str]:
    """Compile ``hide_sme.c`` with the bionic bridge into an arm64 Android ``hide_sme.so``."""
    return [
        str(clang),
        f"--target=aarch64-linux-android{ANDROID_API}",
        "-O2",
        "-shared",
        "-fPIC",
        "-Wall",
        "-Wextra",
        "-o",
        str(out),
        str(SHIM_SOURCE),
        str(bridge),
    ]


def build_android_shim(ndk: Path) -> Path:
    """``hide_sme.so`` for Android arm64, built with the NDK once and cached."""
    clang = ndk_clang(ndk)

    def build(out: Path) -> None:
        bridge = out / "bionic_getauxval.c"
        bridge.write_text(_BIONIC_BRIDGE)
        command = shim_compile_command(clang, out / "hide_sme.so", bridge)
        what = "building the Android sme2-off shim"
        result = run_step(command, what, timeout_s=_COMPILE_TIMEOUT_S)
        if result.returncode != 0:
            raise RunnerError(
                f"{what} failed (exit {result.returncode}): "
                f"{runner_tail(result.stderr)}; command: {shlex.join(command)}"
            )

    key = content_key(SHIM_SOURCE.read_bytes(), _BIONIC_BRIDGE, str(clang), str(ANDROID_API))
    return cached_dir(cache_root() / "android" / f"shim-{key}", build) / "hide_sme.so"
