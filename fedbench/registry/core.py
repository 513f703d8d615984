"""Explicit name -> builder registries with errors that list the valid choices, and the one
check of a config entry's parameter values against its builder's signature.

A builder's keyword-only parameters are the config keys it takes.  Their type hints (``int``,
``float``, ``bool``, ``str``, ``list[int]``, ``Literal[...]``, ``X | None``) are checked as they
are; ranges are declared next to the builder, either in the hint
(``Annotated[float, Range(min=0)]``) or on ``register`` (``bounds={"mu": ">= 0", "alpha": "(0, 1]",
"init": ("random", "clients")}``).  A parameter without a hint or bounds is taken as it is.

A registry may name its ``provider``, the package whose import registers its entries: the
first lookup imports it (plugin-style, like entry points), so a low layer can hold a registry
whose builders live in a higher one (``fedbench.registry.algorithms.ALGORITHMS``).  Every registry
is listed in :data:`REGISTRIES`, so that :mod:`fedbench.registry.plugins` can tell what a plugin registered
and take it back when the plugin fails half-way.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Generic, Literal, TypeVar, Union

T = TypeVar("T", bound=Callable)

REGISTRIES: list["Registry"] = []  # every registry, in creation order


class UnknownNameError(KeyError):
    """A config names something that no registry entry provides."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True)
class Range:
    """Bounds of a numeric parameter (of every element, for a list)."""

    min: float | None = None
    max: float | None = None
    min_inclusive: bool = True
    max_inclusive: bool = True

    @classmethod
    def parse(cls, text: str) -> "Range":
        """``">= 0"``, ``"> 0"``, ``"<= 1"``, ``"< 1"`` or an interval ``"(0, 1]"``, ``"[1, inf)"``."""
        text = text.strip()
        one = re.fullmatch(r"(>=|>|<=|<)\s*(\S+)", text)
        if one:
            op, value = one[1], float(one[2])
            if op.startswith(">"):
                return cls(min=value, min_inclusive=op == ">=")
            return cls(max=value, max_inclusive=op == "<=")
        interval = re.fullmatch(r"([\[(])\s*(\S+)\s*,\s*(\S+)\s*([\])])", text)
        if not interval:
            raise ValueError(f"cannot read bounds {text!r}; write e.g. '>= 0', '> 0' or '(0, 1]'")
        low, high = float(interval[2]), float(interval[3])
        return cls(
            min=None if low == -math.inf else low,
            max=None if high == math.inf else high,
            min_inclusive=interval[1] == "[" or low == -math.inf,
            max_inclusive=interval[4] == "]" or high == math.inf,
        )

    def contains(self, value: float) -> bool:
        if self.min is not None and (value < self.min or (value == self.min and not self.min_inclusive)):
            return False
        if self.max is not None and (value > self.max or (value == self.max and not self.max_inclusive)):
            return False
        return True

    def __str__(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{'>=' if self.min_inclusive else '>'} {self.min:g}")
        if self.max is not None:
            parts.append(f"{'<=' if self.max_inclusive else '<'} {self.max:g}")
        return " and ".join(parts) or "any number"


Bound = Union[Range, str, tuple, list]


def _as_bounds(bound: Bound) -> list[Range | tuple]:
    """Declared bounds: a :class:`Range` (or its string), a tuple of allowed values, or a list of those."""
    if isinstance(bound, list):
        return [b for item in bound for b in _as_bounds(item)]
    if isinstance(bound, Range):
        return [bound]
    if isinstance(bound, str):
        return [Range.parse(bound)]
    return [tuple(bound)]


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"the non-finite number {value}"
    return f"{type(value).__name__} {value!r}"


def _type_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` (as YAML gives it) does not match the type ``hint``; ``None`` if it does."""
    if hint is Any or hint is inspect.Parameter.empty:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _type_problem(value, args[0])
    if origin in (Union, types.UnionType):
        problems = [_type_problem(value, arg) for arg in args]
        if all(problems):
            return f"expected {_type_name(hint)}"
        return None
    if hint is type(None):
        return None if value is None else "expected null"
    if origin is Literal:
        return None if value in args else f"expected one of {', '.join(map(repr, args))}"
    if hint is bool:
        return None if isinstance(value, bool) else "expected true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "expected an integer"
    if hint is float:
        if isinstance(value, str) and _reads_as_number(value):
            return f"expected a number (YAML reads {value} as a string; write it with a dot, e.g. 1.0e-3)"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "expected a number"
        return None if math.isfinite(value) else "expected a finite number"
    if hint is str:
        return None if isinstance(value, str) else "expected a string"
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return f"expected a list ({_type_name(hint)})"
        item = args[0] if args else Any
        for i, element in enumerate(value):
            problem = _type_problem(element, item)
            if problem:
                return f"element {i} is {_describe(element)}; {problem}"
        return None
    if origin is dict or hint is dict:
        return None if isinstance(value, dict) else "expected a mapping"
    if isinstance(hint, type) and hint.__module__ == "pathlib":
        return None if isinstance(value, str) else "expected a path (string)"
    return None  # a type the config cannot spell: left to the builder


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _type_name(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (list, tuple):
        return f"list of {_type_name(args[0]) if args else 'values'}"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(hint, getattr(hint, "__name__", str(hint)))


def _hint_bounds(hint: Any) -> list[Range | tuple]:
    """``Range`` metadata of ``Annotated`` hints (also inside ``X | None``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return [b for b in hint.__metadata__ if isinstance(b, Range)] + _hint_bounds(args[0])
    if origin in (Union, types.UnionType):
        return [b for arg in args for b in _hint_bounds(arg)]
    return []


def _bound_problem(value: Any, bound: Range | tuple) -> str | None:
    if value is None:
        return None
    if isinstance(bound, tuple):  # allowed values, of their own type (FLT's clusters: an integer or "auto")
        if not any(type(value) is type(choice) for choice in bound):
            return None
        return None if value in bound else f"expected one of {', '.join(map(repr, bound))}"
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue  # e.g. FLT's clusters: "auto" besides an integer
        if not bound.contains(v):
            return f"must be {bound}"
    return None


class Registry(Generic[T]):
    """A named table of builders, e.g. ``ALGORITHMS["fedavg"]``.

    Entries are added explicitly with :meth:`register`; lookups of unknown names
    raise :class:`UnknownNameError` naming the kind of thing and the valid choices.
    """

    def __init__(self, kind: str, check: Callable[[str, T], None] | None = None, provider: str | None = None,
                 requires: tuple[str, ...] = ()):
        self.kind = kind
        self._requires = requires  # extras every registration must give (a dataset source's ``facts``)
        self._check = check  # run on every builder at registration (e.g. the algorithm interface)
        self._provider = provider  # imported on the first lookup: its modules register the builders
        self._entries: dict[str, T] = {}
        self._bounds: dict[str, dict[str, list[Range | tuple]]] = {}
        self._extras: dict[str, dict[str, Any]] = {}
        REGISTRIES.append(self)

    def snapshot(self) -> tuple[dict, dict, dict]:
        """The registered entries now, for :meth:`restore` (no lookup: the provider is not imported)."""
        return dict(self._entries), dict(self._bounds), dict(self._extras)

    def restore(self, snapshot: tuple[dict, dict, dict]) -> None:
        """Forget every entry registered since ``snapshot`` was taken."""
        self._entries, self._bounds, self._extras = (dict(part) for part in snapshot)

    def add_check(self, check: Callable[[str, T], None]) -> None:
        """Run ``check`` on every builder registered from now on (and on those already registered)."""
        for name, builder in self._entries.items():
            check(name, builder)
        self._check = check

    def _load(self) -> None:
        """Import the provider package once, before the first lookup."""
        provider, self._provider = self._provider, None
        if provider is not None:
            try:
                importlib.import_module(provider)
            except BaseException:
                self._provider = provider
                raise

    def register(self, name: str, bounds: dict[str, Bound] | None = None, **extras) -> Callable[[T], T]:
        """Add ``builder`` under ``name``; ``bounds`` maps parameters to their allowed range
        (``">= 0"``, ``"(0, 1]"``, a :class:`Range`), allowed values (a tuple), or a list of those.
        ``extras`` are facts a registry's users read with :meth:`extra` (e.g. a dataset's ``facts``)."""
        def add(builder: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            missing = [key for key in self._requires if key not in extras]
            if missing:
                raise ValueError(f"{self.kind} {name!r}: register it with {', '.join(f'{k}=...' for k in missing)}")
            declared = {key: _as_bounds(bound) for key, bound in (bounds or {}).items()}
            if callable(builder):
                unknown = set(declared) - set(inspect.signature(builder).parameters)
                if unknown:
                    raise ValueError(f"{self.kind} {name!r}: bounds for unknown parameters {sorted(unknown)}")
            if self._check is not None:
                self._check(name, builder)
            self._entries[name] = builder
            self._bounds[name] = declared
            self._extras[name] = extras
            return builder

        return add

    def __getitem__(self, name: str) -> T:
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; valid choices: {', '.join(sorted(self._entries))}"
            ) from None

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def parameters(self, name: str) -> dict[str, object]:
        """Keyword parameters the builder accepts, with their defaults (``inspect.Parameter.empty`` if required)."""
        signature = inspect.signature(self[name])
        return {
            p.name: p.default
            for p in signature.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def extra(self, name: str, key: str, default: Any = None) -> Any:
        """A fact registered with the builder (``register(name, key=...)``), else ``default``."""
        self[name]
        return self._extras.get(name, {}).get(key, default)

    def with_defaults(self, name: str, params: dict) -> dict:
        """``params`` with the builder's defaults filled in (required parameters as given)."""
        defaults = {k: v for k, v in self.parameters(name).items() if v is not inspect.Parameter.empty}
        return {**defaults, **params}

    def hints(self, name: str) -> dict[str, Any]:
        """Type hints of the builder's keyword parameters (``inspect.Parameter.empty`` where none)."""
        builder = self[name]
        try:
            resolved = typing.get_type_hints(builder, include_extras=True)
        except Exception:  # a hint that cannot be resolved is not checked
            resolved = {}
        return {key: resolved.get(key, inspect.Parameter.empty) for key in self.parameters(name)}

    def bounds(self, name: str) -> dict[str, list[Range | tuple]]:
        """Every declared bound per parameter: from ``register(bounds=...)`` and ``Annotated`` hints."""
        hints = self.hints(name)
        out = {key: _hint_bounds(hint) for key, hint in hints.items()}
        for key, declared in self._bounds.get(name, {}).items():
            out.setdefault(key, []).extend(declared)
        return {key: bounds for key, bounds in out.items() if bounds}

    def check_params(self, name: str, params: dict, where: str) -> None:
        """Raise ``ValueError`` naming ``where.<key>`` if ``params`` has keys the builder does not
        take, lacks one it requires, or has a value of the wrong type or out of its bounds."""
        allowed = self.parameters(name)
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(
                f"{where}: {self.kind} {name!r} has no parameter {', '.join(map(repr, unknown))}; "
                f"valid parameters: {', '.join(sorted(allowed)) or '(none)'}"
            )
        missing = sorted(k for k, default in allowed.items() if default is inspect.Parameter.empty and k not in params)
        if missing:
            raise ValueError(f"{where}: {self.kind} {name!r} needs {', '.join(map(repr, missing))} (no default)")
        hints, bounds = self.hints(name), self.bounds(name)
        for key, value in params.items():
            problem = _type_problem(value, hints[key])
            for bound in bounds.get(key, []) if problem is None else []:
                problem = problem or _bound_problem(value, bound)
            if problem:
                raise ValueError(f"{where}.{key}: {_describe(value)} is not valid for {self.kind} {name!r}: {problem}")
