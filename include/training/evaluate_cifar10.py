"""The evaluation job of pipelines/cifar10.yaml: score the candidate and the champion on one test split.

Both models are loaded from their job outputs (``model.pt`` in ``$CANDIDATE_DIR`` and, when there is
a champion, ``$CHAMPION_DIR``) and scored on the test split of ``$EVAL_DATA_DIR``, so the gate
compares two numbers measured on the same data. Each model standardises the images itself with the
statistics of the data it was trained on (saved in its state), as it would serving: the champion is
not measured with the candidate's preprocessing. A model's score here is the final test score its
training reported on the same data. Writes ``$OUTPUT_DIR/evaluation.json``:
``{"candidate": {...}, "champion": {...} | null}``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from atomic_io import write_atomically
from cifar10_ddp import EVAL_BATCH_SIZE, Split, load_dataset
from cifar10_model import build_model
from torch import nn


def score(model_dir: Path, test: Split) -> dict[str, float]:
    """Test loss and accuracy of the model saved in ``model_dir``."""
    model = build_model()
    model.load_state_dict(torch.load(model_dir / "model.pt", map_location="cpu", weights_only=True))
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for batch in torch.arange(len(test.labels)).split(EVAL_BATCH_SIZE):
            logits, labels = model(test.images[batch]), test.labels[batch]
            loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == labels).sum())
    return {"test_loss": loss_sum / len(test.labels), "test_accuracy": correct / len(test.labels)}


def main() -> None:
    test = load_dataset(Path(os.environ["EVAL_DATA_DIR"])).test
    champion_dir = os.environ.get("CHAMPION_DIR")
    scores = {
        "candidate": score(Path(os.environ["CANDIDATE_DIR"]), test),
        "champion": score(Path(champion_dir), test) if champion_dir else None,
    }
    out = Path(os.environ["OUTPUT_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    body = (json.dumps(scores, indent=2) + "\n").encode()
    write_atomically(out / "evaluation.json", lambda handle: handle.write(body))
    print(f"evaluation on {len(test.labels)} test images: {json.dumps(scores)}", flush=True)


if __name__ == "__main__":
    main()
