"""The model registry: what to profile.

A model is registered by decorating a factory that returns an ``nn.Module`` in eval mode with
seeded weights, and naming a function that makes seeded example inputs. Built-in example
models (``models/`` at the repository root) and a user's own models (a conftest or any imported
module) go through this one decorator, so both get the same export, caching and tests.

A model may also name *emulation parameters*: keyword arguments (an image size, say) given to both
its factory and its inputs function on devices that emulate the CPU. Under qemu every guest
instruction costs ~100× a native one while what is proven there (packed operator names, which
kernels execute, instruction ratios) does not depend on the input size, so a smaller input keeps
an emulated suite within minutes without weakening its evidence.

Nothing here imports torch: the registry is read by the plugin at collection time, and the plugin
must load where torch is not installed (analysing and judging traces need none).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_sme2.errors import ConfigError

#: Every dtype the export stage knows (:mod:`pytest_sme2.export.recipes`).
DTYPES: tuple[str, ...] = ("fp32", "fp16", "int8", "int8-dynamic", "8da4w")
#: The dtypes a model is registered with unless it names its own: 8da4w (4-bit weights on the
#: linear layers) is what LLMs ship in, and a model opts into it.
DEFAULT_DTYPES: tuple[str, ...] = ("fp32", "fp16", "int8", "int8-dynamic")

ModuleFactory = Callable[..., Any]  # (**params) -> torch.nn.Module
InputsFactory = Callable[..., tuple[Any, ...]]  # (seed, **params) -> tuple of torch.Tensor
#: Keyword arguments for a model's factory and inputs, as sorted pairs so a spec stays hashable.
Params = tuple[tuple[str, int | float | str], ...]


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: how to build it and how to make its inputs.

    The export cache keys on what ``build`` returns and what ``example_inputs`` makes (see
    :func:`pytest_sme2.export.key.program_fingerprint`), so both must give the same result on every
    call: seed weights and inputs, or every session exports afresh.
    """

    name: str
    factory: ModuleFactory
    inputs: InputsFactory
    description: str
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    #: Keyword arguments this spec builds the model and its inputs with; () = their defaults.
    params: Params = ()
    #: The params to use on emulated devices (see the module docstring); () = as on hardware.
    emulation_params: Params = ()
    #: Tokens one inference processes (a language model's prefill: its prompt; a decode step:
    #: 1), or the name of the factory parameter that holds it; None: not a token model.
    tokens: int | str | None = None
    #: ``sme2`` marker keywords this model sets itself, per dtype (``"*"``: every dtype): what
    #: only the model's author knows (a phase's speedup floor, a dtype with no SME2 kernel yet).
    #: They win over the test's marker for this model's cases.
    expect: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False)

    def build(self) -> Any:
        """The model (``torch.nn.Module``), built with this spec's params, on one torch thread.

        Why one: a factory that computes while building (BatchNorm statistics from a forward
        pass) sums in another order on more threads, so its weights, and the program's cache key
        with them, depended on the process's thread count: an export forked onto one thread
        keyed mobilenet_v3_small apart from the session, and the session exported it twice.
        """
        with one_torch_thread():
            return self.factory(**dict(self.params))

    def example_inputs(self, seed: int) -> tuple[Any, ...]:
        """Seeded inputs for the model, made with this spec's params."""
        return self.inputs(seed, **dict(self.params))

    @property
    def tokens_per_inference(self) -> int | None:
        """How many tokens one inference processes, with this spec's params (tokens/s)."""
        if self.tokens is None or isinstance(self.tokens, int):
            return self.tokens
        params = dict(self.params)
        if self.tokens in params:
            return int(params[self.tokens])
        default = inspect.signature(self.factory).parameters[self.tokens].default
        return int(default)

    def expectations(self, dtype: str) -> dict[str, Any]:
        """The marker keywords this model sets for ``dtype``: its ``"*"`` ones, then the
        dtype's own."""
        return {**self.expect.get("*", {}), **self.expect.get(dtype, {})}

    def for_emulation(self) -> ModelSpec:
        """This model as an emulated device runs it: built with its emulation params."""
        return replace(self, params=self.emulation_params) if self.emulation_params else self


_REGISTRY: dict[str, ModelSpec] = {}
#: The file each registered factory is defined in: the same file may register a name again (a
#: module imported twice, under two names), another file may not.
_ORIGINS: dict[str, str | None] = {}


def register_model(
    name: str,
    *,
    inputs: InputsFactory,
    dtypes: Iterable[str] = DEFAULT_DTYPES,
    emulation: Mapping[str, int | float | str] | None = None,
    tokens: int | str | None = None,
    expect: Mapping[str, Mapping[str, Any]] | None = None,
) -> Callable[[ModuleFactory], ModuleFactory]:
    """Register ``factory`` under ``name``; its docstring says what the model stresses.

    ``emulation`` holds keyword arguments for both ``factory`` and ``inputs`` on emulated
    devices, e.g. ``{"image": 112}``. ``tokens`` makes reports show throughput in tokens/s
    (instructions per token where time is emulated): the tokens one inference processes, or the
    name of the factory parameter that holds it (``"prompt"``). ``expect`` holds ``sme2``
    marker keywords per dtype (``"*"`` for all), e.g. ``{"*": {"instruction_ratio_floor": 3}}``:
    they win over the test's marker for this model, and are checked when tests are collected.
    Whatever the factory reads
    (other modules, weights or config files, environment variables) needs no declaring: the
    export cache keys on the model it builds.
    """
    dtypes = tuple(dtypes)
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        raise ConfigError(f"model {name!r}: unknown dtype(s) {unknown}; known: {list(DTYPES)}")
    stray = sorted(set(expect or {}) - {"*", *dtypes})
    if stray:
        raise ConfigError(
            f"model {name!r}: expect names {stray}, which are not its dtypes {list(dtypes)} or '*'"
        )

    def decorate(factory: ModuleFactory) -> ModuleFactory:
        if isinstance(tokens, str) and tokens not in inspect.signature(factory).parameters:
            raise ConfigError(
                f"model {name!r}: tokens={tokens!r} names no parameter of {factory.__name__}"
            )
        origin = inspect.getsourcefile(factory)
        if name in _ORIGINS and _ORIGINS[name] != origin:
            raise ConfigError(
                f"model {name!r} is registered twice ({_ORIGINS[name]} and {origin}); "
                "give one of them another name"
            )
        _ORIGINS[name] = origin
        _REGISTRY[name] = ModelSpec(
            name=name,
            factory=factory,
            inputs=inputs,
            description=inspect.cleandoc(factory.__doc__ or "").split("\n\n")[0],
            dtypes=dtypes,
            emulation_params=tuple(sorted((emulation or {}).items())),
            tokens=tokens,
            expect={key: dict(value) for key, value in (expect or {}).items()},
        )
        return factory

    return decorate


def get_model(name: str) -> ModelSpec:
    """The spec registered as ``name``, or a ConfigError listing what is registered."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none (is the module that registers them imported?)"
        raise ConfigError(f"unknown model {name!r}; registered models: {known}") from None


def registered_models() -> tuple[ModelSpec, ...]:
    """All registered models, in registration order."""
    return tuple(_REGISTRY.values())


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread inside the block, as many as before after it (see
    :meth:`ModelSpec.build`: what a factory computes must not depend on the thread count)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
