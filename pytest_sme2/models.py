"""The model registry: what to profile.

A model is registered by decorating a zero-argument factory that returns an ``nn.Module`` in eval
mode with seeded weights, and naming a function that makes seeded example inputs. Built-in example
models (``models/`` at the repository root) and a user's own models (a conftest or any imported
module) go through this one decorator, so both get the same export, caching and tests.

Nothing here imports torch: the registry is read by the plugin at collection time, and a warm
export cache must be usable without paying torch's import.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError

#: Every dtype the export stage knows; a model may restrict itself to a subset.
DTYPES: tuple[str, ...] = ("fp32", "fp16", "int8", "int8-dynamic")

ModuleFactory = Callable[[], Any]  # () -> torch.nn.Module
InputsFactory = Callable[[int], tuple[Any, ...]]  # seed -> tuple of torch.Tensor


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
        return digest.hexdigest()


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(
    name: str,
    *,
    inputs: InputsFactory,
    dtypes: Iterable[str] = DTYPES,
    extra_files: Iterable[str | Path] = (),
) -> Callable[[ModuleFactory], ModuleFactory]:
    """Register ``factory`` under ``name``; its docstring says what the model stresses.

    ``extra_files`` lists files (e.g. weights) that the factory reads, so that changing them
    invalidates the export cache just like changing the code does.
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
