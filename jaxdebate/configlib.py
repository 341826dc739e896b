"""Typed, frozen, validated config dataclasses: the generic machinery every config section uses.

A config file is any Python file exposing ``get_config()`` (the Flax-examples convention). Command-line
overrides use dotted paths into the dataclass tree, values parsed as Python literals (or JSON, or a
bare string)::

    loss.beta=0.05   training.total_train_steps=2   shaping.params.alpha=0.3
    data.env_name_remap={'math':'math_debate'}   sampler.backend=vllm   logging.wandb=true

A :class:`Section` type-checks every field from its annotation when built and raises
:class:`~jaxdebate.errors.ConfigError` naming ``section.field``. Overrides rebuild the tree, so they are
validated the same way. ``to_dict``/``from_dict`` round-trip through plain types (JSON-able). This module
knows no section: each lives with the package that uses it, and :mod:`jaxdebate.config` assembles them.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import math
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from jaxdebate.errors import ConfigError


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the raw strings
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True
    return tp, False


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def check_value(path: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp`` and return it normalised (int -> float where a
    float is expected, list -> tuple where a tuple is expected). Raises ConfigError naming ``path``."""
    inner, optional = _strip_optional(tp)
    if value is None:
        if optional or tp is Any:
            return None
        raise ConfigError(f"{path} must not be None (expected {_type_name(tp)})")
    tp = inner
    origin = typing.get_origin(tp)
    if tp is Any or isinstance(tp, str):
        return value
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{path} must be one of {list(choices)}, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path} must be a number, got {value!r}")
        if not math.isfinite(value):  # inf/nan (also 1e400) poison training and are not JSON
            raise ConfigError(f"{path} must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path} must be a string, got {value!r}")
        return value
    if origin is tuple or tp is tuple:
        if not isinstance(value, (tuple, list)):
            raise ConfigError(f"{path} must be a list/tuple, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(check_value(f"{path}[{i}]", v, args[0]) for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise ConfigError(f"{path} must have {len(args)} entries, got {len(value)}")
        return tuple(value) if not args else tuple(
            check_value(f"{path}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args))
        )
    if origin in (dict, Mapping) or tp in (dict, Mapping) or origin is typing.get_origin(Mapping[str, Any]):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be a mapping, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2:
            return {
                check_value(f"{path} key", k, args[0]): check_value(f"{path}.{k}", v, args[1])
                for k, v in value.items()
            }
        return dict(value)
    if _is_dataclass_type(tp):
        if not isinstance(value, tp):
            raise ConfigError(f"{path} must be a {tp.__name__}, got {type(value).__name__}")
        return value
    return value


class Section:
    """Mixin for config sections: type-checks every field from its annotation when built.

    Subclasses set ``_name`` (the section's path, used in messages) and may define ``validate()``
    for value checks beyond the types.
    """

    _name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = check_value(f"{self._name}.{f.name}", getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Value checks beyond the annotations; raise ConfigError naming ``section.field``."""

    def _fail(self, field: str, message: str) -> None:
        raise ConfigError(f"{self._name}.{field} {message}, got {getattr(self, field)!r}")

    def _at_least(self, low: float, *fields: str) -> None:
        """Fail on the first of ``fields`` below ``low`` (None, for an optional field, passes)."""
        for field in fields:
            value = getattr(self, field)
            if value is not None and value < low:
                self._fail(field, f"must be >= {low}")

    def _positive(self, *fields: str) -> None:
        """Fail on the first of ``fields`` that is not > 0 (None, for an optional field, passes)."""
        for field in fields:
            value = getattr(self, field)
            if value is not None and not value > 0:
                self._fail(field, "must be > 0")

    def _non_blank(self, *fields: str) -> None:
        """Fail on the first of ``fields`` that is an empty or all-whitespace string (None passes)."""
        for field in fields:
            value = getattr(self, field)
            if value is not None and not value.strip():
                self._fail(field, "must be a non-empty string")


def to_dict(config: Any) -> dict[str, Any]:
    """The config as a plain nested dict (tuples become lists, so it is JSON-able as is)."""

    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, Mapping):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    return plain(config)


def from_dict(cls: type, data: Mapping[str, Any], *, path: str = "") -> Any:
    """Rebuild a dataclass tree of type ``cls`` from :func:`to_dict` output; unknown keys are errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__} must be a mapping, got {data!r}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(
            f"unknown config field {where}{unknown[0]} (known fields{' of ' + path if path else ''}: "
            f"{', '.join(sorted(names))})"
        )
    kwargs = {}
    for key, value in data.items():
        tp, _ = _strip_optional(hints[key])
        sub = f"{path}.{key}" if path else key
        if _is_dataclass_type(tp) and isinstance(value, Mapping):
            value = from_dict(tp, value, path=sub)
        elif (typing.get_origin(tp) is tuple or tp is tuple) and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"cannot build {path or cls.__name__}: {e}") from e


def parse_value(text: str) -> Any:
    """An override's value: a Python literal, else JSON (true/false/null), else the bare string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(text)
    except ValueError:
        return text


def _coerce(value: Any, raw: str, tp: Any) -> Any:
    """Small conveniences for command-line values: ``x=None``/``x=null``, strings that look like
    numbers (``model.source=123``), lists for tuples, and ``true``/``false`` for booleans."""
    inner, optional = _strip_optional(tp)
    if raw.strip().lower() in ("none", "null") and optional:
        return None
    if inner is str and not isinstance(value, str):
        return raw
    if inner is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if (typing.get_origin(inner) is tuple or inner is tuple) and isinstance(value, list):
        return tuple(value)
    return value


def _set_path(tree: dict[str, Any], cls: Any, keys: list[str], raw: str, done: list[str]) -> None:
    """Set the value at ``keys`` in the plain-dict ``tree`` of dataclass type ``cls``."""
    key = keys[0]
    where = ".".join(done + [key])
    if _is_dataclass_type(cls):
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        if key not in fields:
            section = ".".join(done) or "the config"
            raise ConfigError(
                f"unknown config field {where!r} (fields of {section}: {', '.join(sorted(fields))})"
            )
        tp = _hints(cls)[key]
        if len(keys) == 1:
            tree[key] = _coerce(parse_value(raw), raw, tp)
            return
        inner, _ = _strip_optional(tp)
        if not isinstance(tree.get(key), dict):
            raise ConfigError(f"{where} is a {type(tree.get(key)).__name__}, it has no field {keys[1]!r}")
        _set_path(tree[key], inner if _is_dataclass_type(inner) else None, keys[1:], raw, done + [key])
        return
    # a plain mapping field (e.g. shaping.params): keys are free, the owner validates them
    if len(keys) == 1:
        value = parse_value(raw)
        if isinstance(tree.get(key), str) and not isinstance(value, str):
            value = raw
        tree[key] = value
        return
    if not isinstance(tree.get(key), dict):
        raise ConfigError(f"{where} is not a mapping, it has no key {keys[1]!r}")
    _set_path(tree[key], None, keys[1:], raw, done + [key])


def apply_overrides(config: Any, overrides: Iterable[str] = ()) -> Any:
    """Apply ``section.field=value`` overrides, then rebuild and re-validate the whole tree once (so
    overrides that only make sense together, like ``peak_lr`` and ``end_lr``, can be given together)."""
    overrides = list(overrides)
    if not overrides:
        return config
    tree = to_dict(config)
    for item in overrides:
        key, sep, raw = str(item).partition("=")
        key = key.strip()
        if not sep or not key or any(not k for k in key.split(".")):
            raise ConfigError(f"override {item!r} is not of the form section.field=value")
        _set_path(tree, type(config), key.split("."), raw.strip(), [])
    return from_dict(type(config), tree)


def _module_name_for(path: Path) -> tuple[str, Path] | None:
    """``(dotted.name, root)`` when ``path`` lives in a package (directories with __init__.py)."""
    parts = [path.stem]
    parent = path.parent
    while (parent / "__init__.py").is_file():
        parts.insert(0, parent.name)
        parent = parent.parent
    return (".".join(parts), parent) if len(parts) > 1 else None


def load_config_module(path: str | Path) -> types.ModuleType:
    """Import a config file. Files inside a package (``configs/coma.py``) are imported as
    ``configs.coma`` with the package's parent on ``sys.path``, so they can import their siblings
    (``from configs import base``); a standalone file is loaded on its own."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ConfigError(f"config file not found: {path}")
    named = _module_name_for(file)
    try:
        if named is not None:
            name, root = named
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            module = importlib.import_module(name)
            if Path(module.__file__).resolve() != file:
                raise ConfigError(
                    f"config {file} imports as {name!r}, but that name is already taken by "
                    f"{module.__file__}"
                )
            return module
        spec = importlib.util.spec_from_file_location(f"_jaxdebate_config_{file.stem}", file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a broken config file: one clear message
        raise ConfigError(f"cannot import config file {file}: {type(e).__name__}: {e}") from e


def load_config(path: str | Path, overrides: Iterable[str] = (), *, expected: type | None = None) -> Any:
    """``get_config()`` of the Python file at ``path``, with ``overrides`` applied and re-validated.

    A ``get_config()`` that raises, or returns something other than a config dataclass (an instance
    of ``expected`` when given), is a ConfigError naming the file, not a traceback.
    """
    module = load_config_module(path)
    get = getattr(module, "get_config", None)
    if not callable(get):
        raise ConfigError(f"config file {path} has no get_config() function")
    try:
        config = get()
    except ConfigError as e:
        raise ConfigError(f"get_config() of {path}: {e}") from e
    except Exception as e:  # noqa: BLE001 - a broken config file: one clear message
        raise ConfigError(f"get_config() of {path} raised {type(e).__name__}: {e}") from e
    wanted = expected.__name__ if expected is not None else "a config dataclass"
    if (expected is not None and not isinstance(config, expected)) or not (
        dataclasses.is_dataclass(config) and not isinstance(config, type)
    ):
        raise ConfigError(f"get_config() of {path} must return {wanted}, got {type(config).__name__}")
    return apply_overrides(config, overrides)


def diff(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """``[(dotted.path, value_a, value_b)]`` for every leaf where two config trees differ."""
    out: list[tuple[str, Any, Any]] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            for k in sorted(set(x) | set(y), key=str):
                walk(x.get(k, _MISSING), y.get(k, _MISSING), f"{path}.{k}" if path else str(k))
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}[{i}]")
        elif x != y or type(x) is not type(y):
            out.append((path, x, y))

    walk(to_dict(a), to_dict(b), "")
    return out


_MISSING = "<missing>"


def non_finite_path(tree: Any, path: str = "") -> str | None:
    """The dotted path of the first inf/nan float in a plain tree (from :func:`to_dict`), or None."""
    if isinstance(tree, float) and not math.isfinite(tree):
        return path
    items = tree.items() if isinstance(tree, Mapping) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        found = non_finite_path(value, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def format_config(config: Any) -> str:
    """The config as indented, standard JSON (for --print-config and logs); a non-finite float
    (in a free-form mapping no annotation checks) is a ConfigError naming it, never ``Infinity``."""
    tree = to_dict(config)
    bad = non_finite_path(tree)
    if bad is not None:
        raise ConfigError(f"{bad} must be a finite number (JSON has no inf/nan)")
    return json.dumps(tree, indent=2, sort_keys=False, default=str, allow_nan=False)


# ---------------------------------------------------------------------------------------------------
# The RL experiment's own sections (data, debate, shaping and vLLM sections live with their modules).
