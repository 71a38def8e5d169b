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

Nothing here imports torch: the registry is read by the plugin at collection time, and a warm
export cache must be usable without paying torch's import.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError

#: Every dtype the export stage knows; a model may restrict itself to a subset.
DTYPES: tuple[str, ...] = ("fp32", "fp16", "int8", "int8-dynamic")

ModuleFactory = Callable[..., Any]  # (**params) -> torch.nn.Module
InputsFactory = Callable[..., tuple[Any, ...]]  # (seed, **params) -> tuple of torch.Tensor
#: Keyword arguments for a model's factory and inputs, as sorted pairs so a spec stays hashable.
Params = tuple[tuple[str, int | float | str], ...]


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: how to build it, how to make inputs, and what to hash for caching."""

    name: str
    factory: ModuleFactory
    inputs: InputsFactory
    description: str
    dtypes: tuple[str, ...] = DTYPES
    #: Files whose content determines the model (code, weights); hashed into the export cache key.
    source_files: tuple[Path, ...] = field(default=())
    #: Keyword arguments this spec builds the model and its inputs with; () = their defaults.
    params: Params = ()
    #: The params to use on emulated devices (see the module docstring); () = as on hardware.
    emulation_params: Params = ()

    def build(self) -> Any:
        """The model (``torch.nn.Module``), built with this spec's params."""
        return self.factory(**dict(self.params))

    def example_inputs(self, seed: int) -> tuple[Any, ...]:
        """Seeded inputs for the model, made with this spec's params."""
        return self.inputs(seed, **dict(self.params))

    def for_emulation(self) -> ModelSpec:
        """This model as an emulated device runs it: built with its emulation params."""
        return replace(self, params=self.emulation_params) if self.emulation_params else self

    def fingerprint(self) -> str:
        """Content hash of everything that determines this model's weights and graph.

        Weights are seeded inside the factory, so code + seed (+ the torch version, which the export
        stage adds) determine them: no need to build the model to know whether a cache is valid.
        """
        digest = hashlib.sha256(self.name.encode())
        digest.update(self.factory.__qualname__.encode())
        digest.update(self.inputs.__qualname__.encode())
        for path in self.source_files:
            digest.update(path.read_bytes())
        if self.params:  # keeps the keys of default-built models as they were
            digest.update(repr(self.params).encode())
        return digest.hexdigest()


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(
    name: str,
    *,
    inputs: InputsFactory,
    dtypes: Iterable[str] = DTYPES,
    extra_files: Iterable[str | Path] = (),
    emulation: Mapping[str, int | float | str] | None = None,
) -> Callable[[ModuleFactory], ModuleFactory]:
    """Register ``factory`` under ``name``; its docstring says what the model stresses.

    ``extra_files`` lists files (e.g. weights) that the factory reads, so that changing them
    invalidates the export cache just like changing the code does. ``emulation`` holds keyword
    arguments for both ``factory`` and ``inputs`` on emulated devices, e.g. ``{"image": 112}``.
    """
    dtypes = tuple(dtypes)
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        raise ConfigError(f"model {name!r}: unknown dtype(s) {unknown}; known: {list(DTYPES)}")

    def decorate(factory: ModuleFactory) -> ModuleFactory:
        source = inspect.getsourcefile(factory)
        files = ([Path(source)] if source else []) + [Path(f) for f in extra_files]
        spec = ModelSpec(
            name=name,
            factory=factory,
            inputs=inputs,
            description=inspect.cleandoc(factory.__doc__ or "").split("\n\n")[0],
            dtypes=dtypes,
            source_files=tuple(files),
            emulation_params=tuple(sorted((emulation or {}).items())),
        )
        previous = _REGISTRY.get(name)
        if previous is not None and previous.source_files != spec.source_files:
            raise ConfigError(
                f"model {name!r} is registered twice ({previous.source_files[0]} and "
                f"{spec.source_files[0]}); give one of them another name"
            )
        _REGISTRY[name] = spec
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
