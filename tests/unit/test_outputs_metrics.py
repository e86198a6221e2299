"""A job's metrics.json is data it wrote: a non-finite number or a field of the wrong shape fails
the publication, naming the file, the key and the shape, and nothing is published.

Each case is a real metrics.json, written as a script would write it (the bare tokens Python's json
module writes and reads), published as the pipeline publishes it (``publish_artifacts``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from aliyun_training.artifacts.manifest import ArtifactError
from tests.unit.test_artifacts import EPOCHS, _job, _job_output, _publish

if TYPE_CHECKING:
    from pathlib import Path

#: A metrics.json whose first epoch's test_accuracy is ``token``, as the file spells it.
SPELLED = '{{"epochs": [{{"train_loss": 2.3, "test_loss": 2.0, "test_accuracy": {token}}}]}}'


def _refused(tmp_path: Path, body: str) -> str:
    """The error publishing a job whose metrics.json is ``body`` fails with; nothing is published."""
    output = _job_output(tmp_path)
    (output / "metrics.json").write_text(body)

    with pytest.raises(ArtifactError) as refused:
        _publish(tmp_path, _job(output))

    assert not (tmp_path / "artifacts").exists(), "nothing is published"
    return str(refused.value)


@pytest.mark.parametrize(
    ("token", "shown"),
    [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "Infinity")],
)
def test_a_non_finite_metric_fails_the_publication_naming_the_file_and_the_key(
    tmp_path: Path, token: str, shown: str
) -> None:
    message = _refused(tmp_path, SPELLED.format(token=token))

    assert message == (
        f"metrics.json of job local-1234 in {tmp_path / 'job-output'}: epochs[0].test_accuracy is {shown}, "
        "not a finite number (fix: write a finite number; leave out, or write null for, a value that "
        "could not be computed)"
    )


def test_a_non_finite_number_anywhere_in_the_file_is_refused_not_only_in_a_reported_series(
    tmp_path: Path,
) -> None:
    """The file is copied into the set, and a NaN written into manifest.json is no JSON any reader takes."""
    body = json.dumps({"epochs": EPOCHS, "grad_norm": [1.0, float("-inf")]})

    assert ": grad_norm[1] is -Infinity, not a finite number" in _refused(tmp_path, body)


def test_an_integer_no_float_holds_is_refused_before_the_gate_converts_it(tmp_path: Path) -> None:
    body = json.dumps({"epochs": [{**EPOCHS[0], "test_loss": 10**400}]})

    assert ": epochs[0].test_loss is an integer beyond a float's range" in _refused(tmp_path, body)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        (["x"], 'the document is a list, expected an object such as {"epochs": [{"train_loss": 0.9}]}'),
        ({"epochs": "three"}, "epochs is a string, expected a list of one object per finished epoch"),
        ({"epochs": [EPOCHS[0], 7]}, "epochs[1] is a number, expected an object of the epoch's metrics"),
        (
            {"epochs": [{**EPOCHS[0], "attempt": "2"}]},
            "epochs[0].attempt is a string, expected an integer the try number the job ran as",
        ),
        ({"epochs": EPOCHS, "resumes": "x"}, "resumes is a string, expected a list of one object per resume"),
        (
            {"epochs": EPOCHS, "resumes": ["x"]},
            'resumes[0] is a string, expected an object such as {"attempt": 2, "from_epoch": 3}',
        ),
        (
            {"epochs": EPOCHS, "resumes": [{"from_epoch": 1}]},
            "resumes[0].attempt is null, expected an integer the try number the job ran as",
        ),
        (
            {"epochs": EPOCHS, "resumes": [{"attempt": True, "from_epoch": 1}]},
            "resumes[0].attempt is true, expected an integer the try number the job ran as",
        ),
        (
            {"epochs": EPOCHS, "resumes": [{"attempt": 2, "from_epoch": {"epoch": 1}}]},
            "resumes[0].from_epoch is an object, expected an integer the epoch resumed after",
        ),
    ],
)
def test_a_field_the_publisher_reads_in_the_wrong_shape_is_refused_naming_the_key_and_the_shape(
    tmp_path: Path, written: object, message: str
) -> None:
    assert f"in {tmp_path / 'job-output'}: {message}" in _refused(tmp_path, json.dumps(written))


def test_resumes_and_attempts_of_the_shapes_the_training_scripts_write_are_summarized(tmp_path: Path) -> None:
    """The shapes refused above are the ones include/training/checkpoints.py never writes."""
    from aliyun_training.artifacts.collect import attempt_summary, read_metrics
    from aliyun_training.stage_records import Attempt

    output = _job_output(tmp_path, [{**epoch, "attempt": 1 + (i > 0)} for i, epoch in enumerate(EPOCHS)])
    written = json.loads((output / "metrics.json").read_text())
    (output / "metrics.json").write_text(
        json.dumps({**written, "resumes": [{"attempt": 2, "from_epoch": 1, "checkpoint": "c"}]})
    )
    job = _job(output).model_copy(
        update={"attempts": [Attempt(try_number=n, job_id=f"local-{n}", status="Failed") for n in (1, 2)]}
    )

    summary = attempt_summary(job, read_metrics(job, output))

    assert [(a["epochs_run"], a["resumed_after_epoch"]) for a in summary] == [(1, None), (2, 1)]
