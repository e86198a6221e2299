"""What a local job writes is private to the user running the worker, like its logs.

The worker's umask here is the common ``022`` (files 0644, directories 0755 by default), so each
mode asserted below comes from the job's own umask, not the test machine's.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from aliyun_training.backends.base import JobState
from aliyun_training.backends.local import LocalBackend
from aliyun_training.spec import TrainingJobSpec
from tests.integration.test_local_backend import wait_terminal

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: A shell file, a nested directory, a file and directories from Python, and a file written by a
#: background process after the command's own writes: every process of the job, not just its shell.
WRITES = """umask
mkdir -p "$OUTPUT_DIR/checkpoints/epoch-0001"
printf weights > "$OUTPUT_DIR/checkpoints/epoch-0001/state.pt"
printf model > "$OUTPUT_DIR/model.pt"
python -c 'import os, pathlib; out = pathlib.Path(os.environ["OUTPUT_DIR"], "from-python", "sub")
out.mkdir(parents=True); (out / "metrics.json").write_text("{}")'
(sleep 0.2; printf late > "$OUTPUT_DIR/background.txt") &
wait
"""


@pytest.fixture
def worker_umask() -> Iterator[None]:
    """The worker process runs with umask 022 while the job is launched (restored afterwards)."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.slow
def test_a_local_job_writes_its_outputs_0600_and_its_directories_0700(
    tmp_path: Path, worker_umask: None
) -> None:
    backend = LocalBackend(root=str(tmp_path / "runs"), stop_grace_seconds=2)
    outputs = tmp_path / "outputs"
    spec = TrainingJobSpec(nodes=1, command=WRITES, output_dir=str(outputs / "private-outputs"))

    handle = backend.submit(spec, "private-outputs")
    try:
        assert wait_terminal(backend, handle).state is JobState.SUCCEEDED
    finally:
        backend.stop(handle)  # nothing of a job outlives its test, also when it hung

    assert backend.logs(handle).lines == ["[node-0] 0077"]
    modes = {
        path.relative_to(tmp_path).as_posix(): stat.filemode(path.lstat().st_mode)
        for path in [outputs, *outputs.rglob("*")]
    }
    assert modes == {
        "outputs": "drwx------",
        "outputs/private-outputs": "drwx------",
        "outputs/private-outputs/checkpoints": "drwx------",
        "outputs/private-outputs/checkpoints/epoch-0001": "drwx------",
        "outputs/private-outputs/checkpoints/epoch-0001/state.pt": "-rw-------",
        "outputs/private-outputs/model.pt": "-rw-------",
        "outputs/private-outputs/from-python": "drwx------",
        "outputs/private-outputs/from-python/sub": "drwx------",
        "outputs/private-outputs/from-python/sub/metrics.json": "-rw-------",
        "outputs/private-outputs/background.txt": "-rw-------",
    }
