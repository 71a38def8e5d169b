"""The ``--sme2-*`` options and their ini twins → one frozen Settings.

Each option is declared once here (flag, ini name, default, one-line help); the plugin registers
them and the command line wins over ``[tool.pytest.ini_options]``, which wins over the default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sme2.analysis.categories import Classifier
from pytest_sme2.analysis.losses import LOSS_TOLERANCE_PERCENT
from pytest_sme2.errors import ConfigError
from pytest_sme2.export.model_spec import DTYPES, ModelSpec
from pytest_sme2.judge.baseline import Tolerances
from pytest_sme2.measure.plan import MeasurePlan

if TYPE_CHECKING:  # the device modules load when a session resolves its settings, not before
    from pytest_sme2.devices.kinds import DeviceKinds
    from pytest_sme2.devices.spec import DeviceSpec, Platform
    from pytest_sme2.export.program_files import ProgramSpec
    from pytest_sme2.judge.check import Policy


@dataclass(frozen=True)
class Option:
    """One ``--sme2-<name>`` flag; ``kind`` is "str", "int", "float", "bool" or "lines"."""

    name: str
    default: Any
    help: str
    kind: str = "str"

    @property
    def flag(self) -> str:
        return "--sme2-" + self.name

    @property
    def dest(self) -> str:
        return "sme2_" + self.name.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "device",
        "auto",
        "where models run: a device spec KIND[:KEY=VALUE…] (host, qemu-sme2:vl=64, mac, "
        "android:serial=R5CX1234), or a comma-separated fleet of them (ini: sme2_devices too); "
        "auto: the devices that show SME2 here (a CPU without SME2: host and, for each model's "
        "first dtype, qemu-sme2)",
    ),
    Option("runs", "20", "timing-only runs per variant (split over --sme2-rounds)", "int"),
    Option("warmup", "2", "warm-up runs discarded before each measured batch", "int"),
    Option("rounds", "10", "interleaved SME2-on/off rounds the timing runs are split into", "int"),
    Option("traced-runs", "10", "runs in the traced (ETDump) run of each variant", "int"),
    Option(
        "timeout",
        "0",
        "deadline of each runner call in seconds (0: from the case's baseline, 60 s + 20× its "
        "slowest run, else the device's default, 900 native, 3600 emulated); on expiry the run "
        "and its process group are killed",
        "float",
    ),
    Option("threads", "1", "CPU threads: one number or a comma-separated list (1,2)"),
    Option("models", "", "comma-separated model names to run (default: all registered)"),
    Option(
        "dtypes",
        "",
        f"comma-separated dtypes to run (default: each model's own; known: {', '.join(DTYPES)})",
    ),
    Option("baseline-dir", "baselines", "directory of stored baselines, relative to the rootdir"),
    Option("update-baselines", False, "write/refresh baselines instead of failing on them", "bool"),
    Option("strict", False, "treat a skipped gate (device cannot measure it) as a failure", "bool"),
    Option(
        "judge-disturbed",
        False,
        "judge (and record) time even where other work took the CPU from the timed runs: for a "
        "machine that is never quiet, with a wide --sme2-latency-tolerance",
        "bool",
    ),
    Option("artifacts", "", "directory for traces and run artifacts (default: pytest's basetemp)"),
    Option(
        "history",
        "",
        "directory that keeps one record per judged case (commit, device, verdicts), a file per "
        "session and worker; `sme2 history DIR` draws the trends",
    ),
    Option(
        "share-tolerance", "5", "allowed move of a category share, in percentage points", "float"
    ),
    Option(
        "latency-tolerance",
        "3",
        "allowed latency rise / speedup drop, in percent (the floor of a calibrated tolerance)",
        "float",
    ),
    Option(
        "calibrate",
        "0",
        "A/A calibration: measure each case N times unchanged and store the latency gate's noise "
        "in this machine class's time record (N ≥ 2; 0: off); judges nothing",
        "int",
    ),
    Option(
        "instruction-tolerance",
        "1",
        "allowed change of instructions per inference (emulated devices), in percent",
        "float",
    ),
    Option(
        "loss-tolerance",
        f"{LOSS_TOLERANCE_PERCENT:g}",
        "% an operator may cost more with SME2 on than off (instructions on emulated devices, "
        "every traced run's time elsewhere) before the sme2-losses gate fails; off: not judged",
    ),
    Option(
        "peak",
        "0",
        "the chip's peak in GFLOP/s an operator's achieved GFLOP/s is shown against (0: the "
        "known chips' published figure, else 'peak unknown')",
        "float",
    ),
    Option(
        "init-time-tolerance",
        "15",
        "allowed rise of the fastest method init (weight packing) in ms, in percent",
        "float",
    ),
    Option(
        "memory-tolerance",
        "10",
        "allowed rise of the runner's peak resident memory, in percent",
        "float",
    ),
)

#: ini-only (a list does not fit a flag): "Operator = Category" lines overriding the classifier.
CATEGORY_OVERRIDES_INI = "sme2_category_overrides"
#: The ini key of a fleet (``sme2_devices = android:serial=A, mac``), read where no
#: ``--sme2-device`` is given, before ``sme2_device``.
FLEET_INI = "sme2_devices"


@dataclass(frozen=True)
class Case:
    """One parametrized test: a model × dtype × thread count on one device of the fleet (or a
    registered program × its label × thread count)."""

    model: ModelSpec | ProgramSpec
    dtype: str
    threads: int
    show_threads: bool
    device: DeviceSpec
    #: a fleet's test ids carry the device (``qemu-sme2:vl=32-toy_cnn-fp32``); one device's do not
    show_device: bool

    @property
    def id(self) -> str:
        """The test id's parameter part."""
        return f"{self.device.id}-{self.stem}" if self.show_device else self.stem

    @property
    def stem(self) -> str:
        """Model, dtype and thread count: the case's folder in its device's folder."""
        suffix = f"-t{self.threads}" if self.show_threads else ""
        return f"{self.model.name}-{self.dtype}{suffix}"


@dataclass(frozen=True)
class Settings:
    devices: tuple[DeviceSpec, ...]
    plan: MeasurePlan
    threads: tuple[int, ...]
    models: tuple[str, ...]
    dtypes: tuple[str, ...]
    baseline_dir: Path
    update_baselines: bool
    strict: bool
    #: ``--sme2-judge-disturbed``: time gates judge a measurement whose runs lost the CPU too
    judge_disturbed: bool
    #: ``--sme2-calibrate``: measurements per case of an A/A calibration, 0 when not calibrating
    calibrate_runs: int
    artifacts: Path | None
    #: where every judged case's history record goes (``--sme2-history``), None: nowhere
    history: Path | None
    tolerances: Tolerances
    classifier: Classifier
    #: ``--sme2-loss-tolerance`` (%), None: the ``sme2-losses`` gate is off
    loss_tolerance: float | None = LOSS_TOLERANCE_PERCENT

    @property
    def policy(self) -> Policy:
        """The options judging reads (``judge.check``, loaded when a case is judged)."""
        from pytest_sme2.judge.check import Policy

        return Policy(
            tolerances=self.tolerances,
            update=self.update_baselines,
            strict=self.strict,
            judge_disturbed=self.judge_disturbed,
            calibrate_runs=self.calibrate_runs,
            loss_tolerance=self.loss_tolerance,
        )

    def cases(self, registered: Sequence[ModelSpec | ProgramSpec]) -> list[Case]:
        """Every device × selected model × dtype × thread count, device by device and models in
        registration order; on an emulating device, each model as it runs there (its emulation
        params)."""
        known = {spec.name for spec in registered}
        unknown = [name for name in self.models if name not in known]
        if unknown:
            raise ConfigError(
                f"--sme2-models names unknown model(s) {unknown}; registered: {sorted(known)}"
            )
        chosen = [s for s in registered if not self.models or s.name in self.models]
        many = len(self.threads) > 1
        fleet = len(self.devices) > 1
        return [
            Case(spec, dtype, threads, many, device, fleet)
            for device in self.devices
            for spec in (
                [s.for_emulation() for s in chosen] if device.kind.emulates_cpu else chosen
            )
            for dtype in self._dtypes(spec, headline_only=device.headline_only)
            for threads in self.threads
        ]

    def _dtypes(self, spec: ModelSpec | ProgramSpec, *, headline_only: bool) -> list[str]:
        """The model's dtypes this session selects; on a headline-only device (``auto``'s
        emulated one) the first of them, the one its author registered first."""
        selected = [dtype for dtype in spec.dtypes if not self.dtypes or dtype in self.dtypes]
        return selected[:1] if headline_only else selected


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in str(text).split(",") if part.strip())


def _number(option: Option, raw: Any, cast: Callable[[str], Any]) -> Any:
    try:
        return cast(str(raw))
    except ValueError:
        raise ConfigError(f"{option.flag}={raw!r}: expected a {option.kind}") from None


def fleet_specs(
    get_option: Callable[[str], Any],
    get_ini: Callable[[str], Any],
    kinds: DeviceKinds,
    platform: Platform | None = None,
) -> tuple[DeviceSpec, ...]:
    """The session's devices, each one of ``kinds``: ``--sme2-device``, else the ini key
    ``sme2_devices``, else ``sme2_device`` (default ``auto``: ``devices.spec.auto_specs`` of
    ``platform``, this machine unless given)."""
    from pytest_sme2.devices.spec import parse_device_specs

    return parse_device_specs(
        get_option("sme2_device") or get_ini(FLEET_INI) or get_ini("sme2_device"),
        kinds,
        platform=platform,
    )


def _raw_values(get_option: Callable[[str], Any], get_ini: Callable[[str], Any]) -> dict[str, Any]:
    """Each option's value by its dest: the command line's, else the ini's, cast to its kind."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        raw = get_option(option.dest)
        if raw is None or raw is False:
            raw = get_ini(option.dest)
        if option.kind == "int":
            values[option.dest] = _number(option, raw, int)
        elif option.kind == "float":
            values[option.dest] = _number(option, raw, float)
        elif option.kind == "bool":
            values[option.dest] = (
                raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes")
            )
        else:
            values[option.dest] = str(raw)
    return values


def _threads(values: dict[str, Any]) -> tuple[int, ...]:
    threads_opt = next(o for o in OPTIONS if o.name == "threads")
    threads = tuple(_number(threads_opt, t, int) for t in _split(values["sme2_threads"]))
    if not threads or min(threads) < 1:
        raise ConfigError(f"--sme2-threads={values['sme2_threads']!r}: give one or more counts ≥ 1")
    return threads


def _dtypes(values: dict[str, Any]) -> tuple[str, ...]:
    dtypes = _split(values["sme2_dtypes"])
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        raise ConfigError(f"--sme2-dtypes names unknown dtype(s) {unknown}; known: {list(DTYPES)}")
    return dtypes


def _calibrate_runs(values: dict[str, Any]) -> int:
    calibrate_runs = values["sme2_calibrate"]
    if calibrate_runs < 0 or calibrate_runs == 1:
        raise ConfigError(
            f"--sme2-calibrate={calibrate_runs}: give the number of unchanged measurements per "
            "case, at least 2 (5 is a good start), or 0 for none"
        )
    if calibrate_runs and values["sme2_update_baselines"]:
        raise ConfigError(
            "--sme2-calibrate and --sme2-update-baselines do not mix: a calibration measures the "
            "noise against the baseline as stored; update first, then calibrate"
        )
    return calibrate_runs


def _loss_tolerance(raw: str) -> float | None:
    """``--sme2-loss-tolerance``: a percentage ≥ 0, or off (``off``, ``none``): not judged."""
    if raw.strip().lower() in ("off", "none"):
        return None
    try:
        percent = float(raw)
    except ValueError:
        percent = -1.0
    if not percent >= 0:
        raise ConfigError(
            f"--sme2-loss-tolerance={raw!r}: give a percentage ≥ 0 (10: an operator may cost 10 % "
            "more with SME2 on than off) or off"
        )
    return percent


def _peak(gflops: float) -> float | None:
    """``--sme2-peak``: GFLOP/s > 0, or 0 for the known chips' figure."""
    if gflops < 0:
        raise ConfigError(f"--sme2-peak={gflops:g}: give the chip's peak in GFLOP/s, or 0")
    return gflops or None


def resolve(
    get_option: Callable[[str], Any],
    get_ini: Callable[[str], Any],
    rootdir: Path,
    kinds: DeviceKinds,
) -> Settings:
    """Settings from command-line values (None when not given) falling back to ini values; the
    devices each one of ``kinds`` (the session's: ``DeviceKinds.from_hook``)."""
    values = _raw_values(get_option, get_ini)
    threads, dtypes = _threads(values), _dtypes(values)
    calibrate_runs = _calibrate_runs(values)
    artifacts, history = values["sme2_artifacts"], values["sme2_history"]
    return Settings(
        devices=fleet_specs(get_option, get_ini, kinds),
        plan=MeasurePlan(
            runs=values["sme2_runs"],
            warmup=values["sme2_warmup"],
            threads=threads[0],
            rounds=values["sme2_rounds"],
            traced_runs=values["sme2_traced_runs"],
            timeout_s=values["sme2_timeout"] or None,
            peak_gflops=_peak(values["sme2_peak"]),
        ),
        threads=threads,
        models=_split(values["sme2_models"]),
        dtypes=dtypes,
        baseline_dir=rootdir / values["sme2_baseline_dir"],
        update_baselines=values["sme2_update_baselines"],
        strict=values["sme2_strict"],
        judge_disturbed=values["sme2_judge_disturbed"],
        calibrate_runs=calibrate_runs,
        artifacts=Path(artifacts) if artifacts else None,
        history=Path(history) if history else None,
        tolerances=Tolerances(
            share_points=values["sme2_share_tolerance"],
            latency_percent=values["sme2_latency_tolerance"],
            speedup_percent=values["sme2_latency_tolerance"],
            instruction_percent=values["sme2_instruction_tolerance"],
            init_time_percent=values["sme2_init_time_tolerance"],
            peak_rss_percent=values["sme2_memory_tolerance"],
        ),
        classifier=Classifier.from_lines(get_ini(CATEGORY_OVERRIDES_INI) or ()),
        loss_tolerance=_loss_tolerance(values["sme2_loss_tolerance"]),
    )
