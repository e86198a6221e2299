"""The evaluation job of pipelines/imagenet_resnet.yaml: score the candidate and the champion on one split.

Both ResNets are rebuilt from their ``model.pt`` (the width is read off the stem's weights, since a
form may train any width) in ``$CANDIDATE_DIR`` and, when there is a champion, ``$CHAMPION_DIR``,
and scored on every val sample of the shards in ``$EVAL_DATA_DIR``. Writes
``$OUTPUT_DIR/evaluation.json``: ``{"candidate": {...}, "champion": {...} | null}``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from shards import write_atomically
from torch import nn
from train_resnet import EVAL_BATCH_SIZE, Placement, Split, build_model, load_dataset


def score(model_dir: Path, val: Split, classes: int) -> dict[str, float]:
    """Val loss and accuracy (as the training reports them: test_loss, test_accuracy)."""
    state = torch.load(model_dir / "model.pt", map_location="cpu", weights_only=True)
    model = build_model(width=state["0.weight"].shape[0], classes=classes)
    model.load_state_dict(state)
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for batch in torch.arange(len(val.labels)).split(EVAL_BATCH_SIZE):
            logits, labels = model(val.images[batch]), val.labels[batch]
            loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == labels).sum())
    return {"test_loss": loss_sum / len(val.labels), "test_accuracy": correct / len(val.labels)}


def main() -> None:
    alone = Placement(rank=0, world_size=1, local_rank=0, launcher="torchrun")
    _, val, classes = load_dataset(Path(os.environ["EVAL_DATA_DIR"]), alone)
    champion_dir = os.environ.get("CHAMPION_DIR")
    scores = {
        "candidate": score(Path(os.environ["CANDIDATE_DIR"]), val, len(classes)),
        "champion": score(Path(champion_dir), val, len(classes)) if champion_dir else None,
    }
    write_atomically(
        Path(os.environ["OUTPUT_DIR"]) / "evaluation.json", (json.dumps(scores, indent=2) + "\n").encode()
    )
    print(f"evaluation on {len(val.labels)} val samples: {json.dumps(scores)}", flush=True)


if __name__ == "__main__":
    main()
