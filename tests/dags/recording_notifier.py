"""A notifier a test declares (``kind: class``): each notice it is given is one JSON line in a file,
so a test counts what the pipeline's notifiers were told, whichever process told them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from airflow.sdk.bases.notifier import BaseNotifier


class RecordingNotifier(BaseNotifier):
    """Appends the notice of each call to ``path``, with the time it was given (``recorded_at``)."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path

    def notify(self, context: Any) -> None:
        with Path(self.path).open("a", encoding="utf-8") as out:
            out.write(json.dumps({**context["notice"], "recorded_at": time.time()}) + "\n")


def recorded(path: Path) -> list[dict[str, Any]]:
    """The notices recorded in ``path``, oldest first."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
