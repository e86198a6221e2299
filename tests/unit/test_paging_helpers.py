"""The shared paging loops (hooks/paging.py): when a listing has ended, in both paging styles."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aliyun_training.hooks.paging import atoken_pages, numbered_pages, token_pages

if TYPE_CHECKING:
    from collections.abc import Callable

ITEMS = list(range(23))


def _numbered(
    items: list[int], size: int, total: int | str | None, asked: list[int]
) -> Callable[[int], tuple[list[int], int | str | None]]:
    def fetch(number: int) -> tuple[list[int], int | str | None]:
        asked.append(number)
        return items[(number - 1) * size : number * size], total

    return fetch


def test_numbered_pages_read_until_total_count_items_were_seen() -> None:
    asked: list[int] = []

    assert list(numbered_pages(_numbered(ITEMS, 10, 23, asked))) == ITEMS
    assert asked == [1, 2, 3]


def test_numbered_pages_accept_the_total_as_a_string_and_stop_at_an_empty_page() -> None:
    """ACR types TotalCount as a string; a listing that shrank while read ends at its empty page."""
    asked: list[int] = []

    assert list(numbered_pages(_numbered(ITEMS, 10, "40", asked))) == ITEMS
    assert asked == [1, 2, 3, 4]


def test_numbered_pages_without_a_total_read_until_an_empty_page() -> None:
    asked: list[int] = []

    assert list(numbered_pages(_numbered(ITEMS, 10, None, asked))) == ITEMS
    assert asked == [1, 2, 3, 4]


def test_numbered_pages_stop_at_max_pages_and_fetch_no_further_than_read() -> None:
    asked: list[int] = []
    assert list(numbered_pages(_numbered(ITEMS, 10, 23, asked), max_pages=2)) == ITEMS[:20]
    assert asked == [1, 2]

    asked.clear()
    assert next(item for item in numbered_pages(_numbered(ITEMS, 10, 23, asked)) if item == 4) == 4
    assert asked == [1], "a search that ends on page 1 asks for no page 2"


def test_token_pages_follow_next_token_until_the_last_page() -> None:
    tokens = {None: (ITEMS[:10], "t2"), "t2": (ITEMS[10:20], "t3"), "t3": (ITEMS[20:], "")}
    asked: list[str | None] = []

    def fetch(token: str | None) -> tuple[list[int], str | None]:
        asked.append(token)
        return tokens[token]

    assert list(token_pages(fetch)) == ITEMS
    assert asked == [None, "t2", "t3"]


def test_atoken_pages_is_the_async_twin() -> None:
    tokens = {None: (ITEMS[:10], "t2"), "t2": (ITEMS[10:], None)}

    async def fetch(token: str | None) -> tuple[list[int], str | None]:
        return tokens[token]

    async def collect() -> list[int]:
        return [item async for item in atoken_pages(fetch)]

    assert asyncio.run(collect()) == ITEMS
