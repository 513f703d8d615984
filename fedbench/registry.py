"""Explicit name -> builder registries with errors that list the valid choices."""

from __future__ import annotations

import inspect
from typing import Callable, Generic, TypeVar

T = TypeVar("T", bound=Callable)


class UnknownNameError(KeyError):
    """A config names something that no registry entry provides."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class Registry(Generic[T]):
    """A named table of builders, e.g. ``ALGORITHMS["fedavg"]``.

    Entries are added explicitly with :meth:`register`; lookups of unknown names
    raise :class:`UnknownNameError` naming the kind of thing and the valid choices.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(builder: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = builder
            return builder

        return add

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; valid choices: {', '.join(sorted(self._entries))}"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def parameters(self, name: str) -> dict[str, object]:
        """Keyword parameters the builder accepts, with their defaults (``inspect.Parameter.empty`` if required)."""
        signature = inspect.signature(self[name])
        return {
            p.name: p.default
            for p in signature.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }

    def check_params(self, name: str, params: dict, where: str) -> None:
        """Raise ``ValueError`` if ``params`` has keys the builder does not take."""
        allowed = self.parameters(name)
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(
                f"{where}: {self.kind} {name!r} has no parameter {', '.join(map(repr, unknown))}; "
                f"valid parameters: {', '.join(sorted(allowed)) or '(none)'}"
            )
