"""Provision the emulated Armv9-with-SME2 device from the repository alone (Debian/Ubuntu x86-64).

What it needs and where each piece comes from:

* ``qemu-aarch64`` >= 11, whose ``-cpu max`` has SME2 (Debian bookworm's 7.2 has not). Either the
  user's (``SME2_QEMU`` or the ``qemu`` argument), or the static binary out of the ``qemu-user``
  package of Debian trixie-backports, fetched with a *private* apt configuration under our cache:
  the system's apt sources, preferences and installed packages are never touched, so nothing on
  the machine upgrades and no root is needed for this step.
* The aarch64 cross toolchain and target libraries (``g++-aarch64-linux-gnu``,
  ``libc6-dev-arm64-cross``), installed with apt when missing: the runner is cross-built with it,
  and qemu runs the guest against its libraries (``-L /usr/aarch64-linux-gnu``; the wheel's
  libraries need only libc, libm, libstdc++ and libgcc_s from there).
* The aarch64 executorch wheel of the installed executorch version, unpacked: the runner is
  cross-built against its ``executorch`` directory and the guest loads its libraries, which carry
  the KleidiAI SME/SME2 kernels.
* ``hide_sme.so`` (``shim/hide_sme.c``), preloaded into the guest for the sme2-off variant: the
  same binary on the same ``-cpu max``, with getauxval denying SME, so the only variable between
  the variants is what XNNPACK is told about the CPU.

Every piece is verified once when it enters the cache (``cache_root()/qemu-sme2``), and a
verification failure says what is missing and the command that fixes it.
"""

from __future__ import annotations

import functools
import getpass
import importlib.metadata
import os
import re
import shutil
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from pytest_sme2 import progress
from pytest_sme2.cache import cache_root, cached_dir, content_key, write_atomic
from pytest_sme2.devices.guest_root import guest_root
from pytest_sme2.devices.qemu_log import QEMU_LOG_FLAGS
from pytest_sme2.errors import ConfigError, RunnerError, Sme2Error
from pytest_sme2.runner.invoke import ANSWER_TIMEOUT_S, run_step

QEMU_ENV = "SME2_QEMU"
"""Environment variable naming a user-supplied ``qemu-aarch64`` (>= 11)."""

MIN_QEMU_MAJOR = 11
SYSROOT = Path("/usr/aarch64-linux-gnu")
CROSS_PACKAGES = ("g++-aarch64-linux-gnu", "libc6-dev-arm64-cross")
SHIM_SOURCE = Path(__file__).resolve().parent / "shim" / "hide_sme.c"

HWCAP2_SME = 1 << 23
HWCAP2_SME2 = 1 << 37

_TRIPLE = "aarch64-linux-gnu"
_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
_BACKPORTS = f"deb [signed-by={_KEYRING}] http://deb.debian.org/debian trixie-backports main"
_WHEEL_PLATFORM = "manylinux_2_28_aarch64"
# Each step's deadline, sized to its job (a hang becomes one line naming the step and command,
# not 45 minutes of waiting; a question a tool answers at once has ANSWER_TIMEOUT_S): a probe
# under qemu (a ten-line guest program, under a second here), compiling two small C files, apt's
# package lists, and a download (qemu-user's .deb, the ~100 MB aarch64 executorch wheel) or a
# package installation.
#: (Public: the test of a hung probe sets it to seconds rather than wait for 30.)
PROBE_TIMEOUT_S = 30
#: Seconds provisioning runs before it says which step it is at: a provisioned cache answers in
#: well under that; a fresh machine spends minutes on apt and downloads (``progress``).
PROVISION_QUIET_S = 3.0
_COMPILE_TIMEOUT_S = 120
_APT_UPDATE_TIMEOUT_S = 300
_DOWNLOAD_TIMEOUT_S = 900
_EXTRACT_TIMEOUT_S = 120
# Prints the two capability words cpuinfo (hence XNNPACK) decides by, in hex.
_PROBE_SOURCE = """\
#include <stdio.h>
#include <sys/auxv.h>
int main(void) {
    printf("%lx %lx\\n", getauxval(AT_HWCAP), getauxval(AT_HWCAP2));
    return 0;
}
"""


@dataclass(frozen=True)
class QemuToolchain:
    """Everything the qemu-sme2 device needs, provisioned and verified.

    ``executorch_dir`` is the unpacked aarch64 wheel's ``executorch`` directory (pass it to
    ``build_runner(target="aarch64", executorch_dir=...)``); ``shim`` the guest-side
    ``hide_sme.so``; ``hwcap_probe`` a guest program printing ``AT_HWCAP AT_HWCAP2`` in hex;
    ``cc``/``cxx`` the aarch64 cross compilers; ``sysroot`` the guest's root (``-L``): the
    cross libraries and a fixed CPU view (:mod:`pytest_sme2.devices.guest_root`).
    """

    qemu: Path
    qemu_version: str
    sysroot: Path
    executorch_dir: Path
    shim: Path
    hwcap_probe: Path
    cc: Path
    cxx: Path


@dataclass(frozen=True)
class Hwcaps:
    """The hardware capability words a guest process sees (``getauxval``)."""

    hwcap: int
    hwcap2: int

    @property
    def sme(self) -> bool:
        return bool(self.hwcap2 & HWCAP2_SME)

    @property
    def sme2(self) -> bool:
        return bool(self.hwcap2 & HWCAP2_SME2)


def provision_qemu(
    *, qemu: Path | None = None, log: Callable[[str], None] = print
) -> QemuToolchain:
    """Provision (first call) or find (later calls) the qemu-sme2 toolchain.

    ``qemu`` (else ``$SME2_QEMU``) selects a user-supplied ``qemu-aarch64``; without one, the
    Debian trixie-backports build is fetched into the cache. ``log`` is told about slow steps.
    Raises ConfigError for a bad user-supplied qemu, RunnerError for anything else missing.
    """
    root = cache_root() / "qemu-sme2"
    root.mkdir(parents=True, exist_ok=True)
    with progress.task("provision qemu-sme2", quiet_s=PROVISION_QUIET_S) as running:
        running.stage("cross compilers")
        cc, cxx = _cross_compilers(root, log)
        running.stage("probe tools")
        tools = cached_dir(root / f"tools-{_tools_key(cc)}", lambda tmp: _build_tools(tmp, cc))
        shim, probe = tools / "hide_sme.so", tools / "hwcap_probe"
        running.stage("qemu-user")
        if qemu is None and os.environ.get(QEMU_ENV):
            qemu = Path(os.environ[QEMU_ENV])
        if qemu is not None:
            qemu_path = qemu.expanduser().resolve()
            version = _verified_user_qemu(qemu_path, shim, probe)
        else:
            entry = cached_dir(
                root / f"qemu-{content_key('qemu-user', _BACKPORTS, _host_arch())}",
                lambda tmp: _fetch_qemu(tmp, shim, probe, log),
            )
            qemu_path, version = entry / "qemu-aarch64", (entry / "version").read_text().strip()
        running.stage("aarch64 executorch wheel")
        executorch_dir = _aarch64_wheel(root, log)
    return QemuToolchain(
        qemu=qemu_path,
        qemu_version=version,
        sysroot=guest_root(SYSROOT),
        executorch_dir=executorch_dir,
        shim=shim,
        hwcap_probe=probe,
        cc=cc,
        cxx=cxx,
    )


def qemu_command(
    tc: QemuToolchain,
    *,
    sme2: bool,
    exec_log: Path | None = None,
    sme_vector_length: int | None = None,
) -> list[str]:
    """The command prefix that runs an aarch64 program as ``sme2-on`` or ``sme2-off``.

    Both variants use ``-cpu max`` (SME2 present); sme2-off preloads the shim, so the guest's
    getauxval denies SME. sme2-on unsets a host LD_PRELOAD qemu would otherwise pass to the guest.
    ``exec_log`` turns on the instruction log read by :mod:`pytest_sme2.devices.qemu_log` (the
    run gets ~5x slower and the log hundreds of MB; a FIFO keeps it off the disk).
    ``sme_vector_length`` sets the streaming vector length in bytes (a power of two from 16;
    qemu's default is 32; the wheel's kernels crash above 64): SME kernels, and so instruction
    counts, scale with it.
    """
    cpu = (
        "max" if sme_vector_length is None else f"max,sme-default-vector-length={sme_vector_length}"
    )
    command = [str(tc.qemu), "-cpu", cpu, "-L", str(tc.sysroot)]
    command += ["-E", f"LD_PRELOAD={tc.shim}"] if not sme2 else ["-U", "LD_PRELOAD"]
    if exec_log is not None:
        command += ["-d", QEMU_LOG_FLAGS, "-D", str(exec_log)]
    return command


def read_hwcaps(tc: QemuToolchain, *, sme2: bool) -> Hwcaps:
    """What getauxval tells a guest process in the ``sme2`` (or sme2-off) variant."""
    return _probe([*qemu_command(tc, sme2=sme2), str(tc.hwcap_probe)])


# --- cross toolchain ---------------------------------------------------------------------------


def _cross_compilers(root: Path, log: Callable[[str], None]) -> tuple[Path, Path]:
    """The aarch64 gcc and g++, installing Debian's cross packages (as root) when missing."""
    found = _find_cross()
    if found is not None:
        return found
    install = f"apt-get install -y --no-install-recommends {' '.join(CROSS_PACKAGES)}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RunnerError(
            f"the aarch64 cross toolchain is missing ({_TRIPLE}-g++ or {SYSROOT}/lib): "
            f"sudo apt-get update && sudo {install}"
        )
    with FileLock(str(root / "apt.lock")):
        if (found := _find_cross()) is not None:  # another worker installed it meanwhile
            return found
        log(f"qemu-sme2: installing {', '.join(CROSS_PACKAGES)} with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "update"], "apt-get update", _APT_UPDATE_TIMEOUT_S, env=env)
        _run(install.split(), install, _DOWNLOAD_TIMEOUT_S, env=env)
    found = _find_cross()
    if found is None:
        raise RunnerError(
            f"{install} succeeded but {_TRIPLE}-g++ or {SYSROOT}/lib is still missing"
        )
    return found


def _find_cross() -> tuple[Path, Path] | None:
    cc, cxx = shutil.which(f"{_TRIPLE}-gcc"), shutil.which(f"{_TRIPLE}-g++")
    libs = all((SYSROOT / "lib" / name).is_file() for name in ("libc.so.6", "libstdc++.so.6"))
    return (Path(cc), Path(cxx)) if cc and cxx and libs else None


def _tools_key(cc: Path) -> str:
    return content_key(SHIM_SOURCE.read_bytes(), _PROBE_SOURCE, _first_line([str(cc), "--version"]))


def _build_tools(out: Path, cc: Path) -> None:
    """Cross-compile the shim and the capability probe (both dynamically linked: LD_PRELOAD
    works only through the dynamic loader)."""
    probe_source = out / "hwcap_probe.c"
    probe_source.write_text(_PROBE_SOURCE)
    shim = [str(cc), "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror"]
    shim += ["-o", str(out / "hide_sme.so"), str(SHIM_SOURCE)]
    _run(shim, f"compiling {SHIM_SOURCE}", _COMPILE_TIMEOUT_S)
    probe = [str(cc), "-O2", "-Wall", "-o", str(out / "hwcap_probe"), str(probe_source)]
    _run(probe, "compiling the hwcap probe", _COMPILE_TIMEOUT_S)


# --- qemu ----------------------------------------------------------------------------------------


def _host_arch() -> str:
    return _first_line(["dpkg", "--print-architecture"]) if shutil.which("dpkg") else "unknown"


def _fetch_qemu(out: Path, shim: Path, probe: Path, log: Callable[[str], None]) -> None:
    """Download Debian trixie-backports' qemu-user with a private apt setup and keep only its
    static ``qemu-aarch64`` (verified before the cache entry appears)."""
    missing = [tool for tool in ("apt-get", "dpkg-deb", "tar") if shutil.which(tool) is None]
    if missing:
        raise RunnerError(
            f"cannot fetch qemu-aarch64 >= {MIN_QEMU_MAJOR} without {', '.join(missing)} (not a "
            f"Debian-like system): install qemu-user >= {MIN_QEMU_MAJOR} and set {QEMU_ENV}="
            "/path/to/qemu-aarch64"
        )
    if not _KEYRING.is_file():
        raise RunnerError(
            f"{_KEYRING} is missing (needed to verify Debian's trixie-backports): "
            "apt-get install debian-archive-keyring"
        )
    apt = out / "apt"
    for sub in ("lists/partial", "archives/partial", "cache", "etc/parts", "etc/preferences.d"):
        (apt / sub).mkdir(parents=True)
    (apt / "etc/sources.list").write_text(_BACKPORTS + "\n")
    options = {
        "Dir::Etc::SourceList": apt / "etc/sources.list",
        "Dir::Etc::SourceParts": apt / "etc/parts",
        "Dir::Etc::Preferences": apt / "etc/preferences",
        "Dir::Etc::PreferencesParts": apt / "etc/preferences.d",
        "Dir::State::Lists": apt / "lists",
        "Dir::Cache": apt / "cache",
        "Dir::Cache::Archives": apt / "archives",
        "APT::Sandbox::User": getpass.getuser(),  # root's _apt cannot write to our cache
    }
    apt_get = ["apt-get", "-q"] + [f"-o{key}={value}" for key, value in options.items()]
    log("qemu-sme2: fetching qemu-user (qemu-aarch64 >= 11) from Debian trixie-backports")
    lists = "apt-get update (trixie-backports only, private apt lists)"
    _run([*apt_get, "update"], lists, _APT_UPDATE_TIMEOUT_S)
    download = [*apt_get, "download", "qemu-user"]
    _run(download, "apt-get download qemu-user", _DOWNLOAD_TIMEOUT_S, cwd=apt)
    (deb,) = apt.glob("qemu-user_*.deb")
    qemu = out / "qemu-aarch64"
    _extract_from_deb(deb, "./usr/bin/qemu-aarch64", qemu)
    shutil.rmtree(apt)
    version = _verify_qemu(
        qemu,
        shim,
        probe,
        fix=f"set {QEMU_ENV} to a qemu-aarch64 >= {MIN_QEMU_MAJOR} that has SME2",
        error=RunnerError,
    )
    write_atomic(out / "version", version + "\n")


def _extract_from_deb(deb: Path, member: str, dest: Path) -> None:
    """Stream one file out of a .deb's data archive (the other 40 emulators stay packed): one
    pipeline under one deadline, killed with its process group if it hangs."""
    pipeline = 'dpkg-deb --fsys-tarfile "$0" | tar -xOf - "$1" > "$2"'
    command = ["sh", "-c", pipeline, str(deb), member, str(dest)]
    result = run_step(command, f"extracting {member} from {deb.name}", timeout_s=_EXTRACT_TIMEOUT_S)
    if result.returncode != 0 or not dest.is_file() or dest.stat().st_size == 0:
        raise RunnerError(f"{deb.name}: no {member} in it ({_tail(result.stderr)})")
    dest.chmod(0o755)


def _verified_user_qemu(qemu: Path, shim: Path, probe: Path) -> str:
    """Verify a user-supplied qemu once per process and file state (--version, 3 probe runs)."""
    try:
        stat = qemu.stat()
    except OSError as err:
        raise ConfigError(
            f"{QEMU_ENV}={qemu}: no such qemu-aarch64 ({err.strerror}); unset {QEMU_ENV} to let "
            "pytest-sme2 fetch one"
        ) from err
    return _verify_cached(qemu, stat.st_mtime_ns, stat.st_size, shim, probe)


@functools.cache
def _verify_cached(qemu: Path, _mtime_ns: int, _size: int, shim: Path, probe: Path) -> str:
    fix = f"unset {QEMU_ENV} to let pytest-sme2 fetch one"
    return _verify_qemu(qemu, shim, probe, fix=fix, error=ConfigError)


def _verify_qemu(qemu: Path, shim: Path, probe: Path, *, fix: str, error: type[Sme2Error]) -> str:
    """Check that ``qemu`` is qemu-aarch64 >= 11, that ``-cpu max`` shows SME and SME2, and that
    the shim hides exactly what ``-cpu max,sme=off`` hides. Returns its version.

    ``error`` is ConfigError for a user-supplied qemu (the user's to fix), RunnerError for ours.
    """
    try:
        result = run_step([str(qemu), "--version"], f"{qemu} --version", timeout_s=ANSWER_TIMEOUT_S)
    except RunnerError as err:
        raise error(f"{qemu}: cannot run it as qemu-aarch64 ({err}); {fix}") from None
    match = re.search(r"qemu-aarch64 version (\d+)\.(\d+)(?:\.(\d+))?", result.stdout)
    if result.returncode != 0 or match is None:
        said = _first(result.stdout + result.stderr)
        raise error(f"{qemu}: not qemu-aarch64 (--version says {said!r}); {fix}")
    version = ".".join(part for part in match.groups() if part is not None)
    if int(match[1]) < MIN_QEMU_MAJOR:
        raise error(f"{qemu}: qemu-aarch64 {version} has no SME2, need >= {MIN_QEMU_MAJOR}; {fix}")
    base = [str(qemu), "-L", str(SYSROOT)]
    on = _probe([*base, "-cpu", "max", str(probe)])
    off = _probe([*base, "-cpu", "max,sme=off", str(probe)])
    masked = _probe([*base, "-cpu", "max", "-E", f"LD_PRELOAD={shim}", str(probe)])
    if not (on.sme and on.sme2):
        raise error(f"{qemu}: -cpu max reports no SME2 (HWCAP2={on.hwcap2:#x}); {fix}")
    if masked != off:
        raise RunnerError(
            f"{shim}: the sme2-off shim shows HWCAP={masked.hwcap:#x} HWCAP2={masked.hwcap2:#x}, "
            f"but -cpu max,sme=off shows HWCAP={off.hwcap:#x} HWCAP2={off.hwcap2:#x}: update "
            f"the masks in {SHIM_SOURCE} (see Linux arch/arm64/include/uapi/asm/hwcap.h)"
        )
    return version


def _probe(command: Sequence[str]) -> Hwcaps:
    output = _run(list(command), "the hwcap probe under qemu", PROBE_TIMEOUT_S)
    try:
        hwcap, hwcap2 = (int(word, 16) for word in output.split())
    except ValueError as err:
        raise RunnerError(f"the hwcap probe printed {output!r}: {' '.join(command)}") from err
    return Hwcaps(hwcap, hwcap2)


# --- aarch64 executorch wheel -----------------------------------------------------------------


def _aarch64_wheel(root: Path, log: Callable[[str], None]) -> Path:
    """The unpacked ``executorch`` directory of the aarch64 wheel matching the installed one."""
    try:
        version = importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError as err:
        raise RunnerError(
            "executorch is not installed (its version picks the aarch64 wheel): pip install "
            '"pytest-sme2[export]"'
        ) from err
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = content_key(version, _WHEEL_PLATFORM, python)
    entry = cached_dir(
        root / f"executorch-{version}-aarch64-{key}",
        lambda tmp: _fetch_wheel(tmp, version, python, log),
    )
    return entry / "executorch"


def _fetch_wheel(out: Path, version: str, python: str, log: Callable[[str], None]) -> None:
    log(f"qemu-sme2: downloading the aarch64 executorch {version} wheel")
    pip_download(out / "wheel", f"executorch=={version}", (_WHEEL_PLATFORM,), python)
    (wheel,) = (out / "wheel").glob("executorch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(out, [n for n in archive.namelist() if n.startswith("executorch/")])
    shutil.rmtree(out / "wheel")
    config = out / "executorch/share/cmake/executorch-config.cmake"
    if not config.is_file():
        raise RunnerError(
            f"{wheel.name}: no {config.relative_to(out)}; cannot cross-build against it"
        )


def pip_download(
    dest: Path, requirement: str, platforms: Sequence[str], python: str, *, deps: bool = False
) -> None:
    """Download the aarch64 wheels of ``requirement`` into ``dest`` with pip (binary wheels for
    ``platforms`` and ``python``; with their dependencies where ``deps``)."""
    download = [sys.executable, "-m", "pip", "download", "--only-binary=:all:"]
    download += [] if deps else ["--no-deps"]
    for platform in platforms:
        download += ["--platform", platform]
    download += ["--python-version", python, "--dest", str(dest), requirement]
    _run(download, " ".join(["pip", *download[3:]]), _DOWNLOAD_TIMEOUT_S)


# --- helpers -------------------------------------------------------------------------------------


def _run(
    command: list[str],
    what: str,
    timeout_s: float,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run a provisioning step under its deadline (``run_step``); RunnerError naming the step
    and its last output on failure."""
    result = run_step(command, what, timeout_s=timeout_s, cwd=cwd, env=env)
    if result.returncode != 0:
        raise RunnerError(
            f"{what} failed (exit {result.returncode}): {_tail(result.stderr or result.stdout)}"
        )
    return result.stdout


def _first_line(command: list[str]) -> str:
    """The first line a tool answers a question with (``--version``)."""
    return _first(_run(command, " ".join(command), ANSWER_TIMEOUT_S))


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"
