"""Every item of an Alibaba Cloud list API, whichever of its two paging styles it uses.

List APIs answer one page at a time, and a small one by default (VPC's Describe* calls: 10 items),
so a caller that reads only the first answer silently misses the rest: a NAT gateway on page 2
looks like no NAT gateway at all. Two styles exist:

- numbered pages (VPC/ECS ``PageNumber``, ACR ``PageNo``, PAI ``PageNumber``; with ``PageSize``),
  each answer carrying ``TotalCount``: :func:`numbered_pages`;
- continuation tokens (NAS ``NextToken`` with ``MaxResults``): :func:`token_pages` and its async
  twin :func:`atoken_pages`, for triggers.

The callers build the request of one page; these loops only decide when the listing has ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

#: One numbered page: its items and the answer's TotalCount (a number, a numeric string, or None).
NumberedPage = tuple[Sequence[T], int | str | None]
#: One token page: its items and the token of the next page (empty or None on the last page).
TokenPage = tuple[Sequence[T], str | None]


def numbered_pages(fetch: Callable[[int], NumberedPage[T]], max_pages: int | None = None) -> Iterator[T]:
    """Every item of pages 1, 2, ... until TotalCount items were seen or a page comes back empty.

    ``fetch(n)`` asks for page ``n``. Stopping on an empty page too ends the loop when the listing
    shrinks while it is read, or when an answer leaves TotalCount out; ``max_pages`` bounds a search
    that is only worth so many pages (newest items first).
    """
    seen = 0
    number = 1
    while max_pages is None or number <= max_pages:
        items, total = fetch(number)
        yield from items
        seen += len(items)
        if not items or (total is not None and total != "" and seen >= int(total)):
            return
        number += 1


def token_pages(fetch: Callable[[str | None], TokenPage[T]]) -> Iterator[T]:
    """Every item of a NextToken listing: ``fetch(None)`` first, then each answer's token until none."""
    token: str | None = None
    while True:
        items, token = fetch(token)
        yield from items
        if not token:
            return


async def atoken_pages(fetch: Callable[[str | None], Awaitable[TokenPage[T]]]) -> AsyncIterator[T]:
    """The async twin of :func:`token_pages`."""
    token: str | None = None
    while True:
        items, token = await fetch(token)
        for item in items:
            yield item
        if not token:
            return
