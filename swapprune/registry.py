"""Name registries: plain dicts behind a decorator.

The registered names are the public API (``swapprune list`` prints them), so
an unknown name is a user error with a "did you mean" hint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from swapprune.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of extension objects (criteria, strategies, mergers)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that files an object under ``name``."""

        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        """Return the object registered as ``name`` or raise a user error."""
        try:
            return self._items[name]
        except KeyError:
            raise unknown_name(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
