"""Where the documentation pages are: the checkout's ``docs/``, or the copy a wheel carries.

The CLI's help and messages name pages as ``docs/<page>.md``; an installed wheel is in no checkout,
so setup.py ships the pages as ``lockcompare/_docs`` and ``lockcompare docs PAGE`` prints one.
"""

from __future__ import annotations

from pathlib import Path

from lockcompare.errors import InvalidValueError

_PACKAGE = Path(__file__).resolve().parent


def docs_dir() -> Path | None:
    """The pages this installation carries: the wheel's copy, else the checkout's ``docs/``."""
    packaged = _PACKAGE / "_docs"
    if packaged.is_dir():
        return packaged
    checkout = _PACKAGE.parent.parent / "docs"
    return checkout if _PACKAGE.parent.name == "src" and checkout.is_dir() else None


def pages() -> dict[str, Path]:
    """Every page by name (``verdicts`` for ``verdicts.md``), sorted."""
    where = docs_dir()
    return {p.stem: p for p in sorted(where.glob("*.md"))} if where is not None else {}


def page(name: str) -> Path:
    """The page ``name`` (``verdicts``, ``verdicts.md`` or ``docs/verdicts.md``); one line naming
    the pages there are when it is not one of them."""
    stem = Path(name).name.removesuffix(".md")
    found = pages()
    if stem not in found:
        known = ", ".join(found) or "none: this installation carries no documentation"
        raise InvalidValueError(f"no documentation page {name!r} (pages: {known})")
    return found[stem]
