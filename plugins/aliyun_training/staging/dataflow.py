"""The ``dataflow`` stager: CPFS imports a dataset version from OSS itself, through a data flow.

Nothing passes through Airflow: the import task copies OSS objects straight onto CPFS, which is
the fastest path for large datasets on CPFS editions with OSS data flows. What the engine
guarantees on its own has to be obtained differently here:

- verification: before submitting, the version's objects are listed in OSS; after the task
  completes, its ProgressStats must account for every file and byte, and a second listing must
  match the first (same keys, sizes and ETags) — otherwise the source changed during the import;
- idempotence: the task's ClientToken is derived from the file system, the flow, the
  directories and the listing, so a retried submit answers the same task;
- atomicity: CPFS cannot rename on our behalf, so the version's directory fills while the task
  runs. The pipeline only hands the version to training once the task completed and verified;
  readers outside the pipeline must wait for the task too. That is documented, not hidden.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.remote import RemoteStatus
from aliyun_training.spec import DATASET_VERSION_PATTERN
from aliyun_training.stage_records import StagedDataset
from aliyun_training.staging.sources import SourceObject, StagingError
from aliyun_training.validation import SpecError, field_fix, validate_record

if TYPE_CHECKING:
    from aliyun_training.hooks.nas import NasHook

#: Import tasks started for one input before giving up (each earlier one failed or was cancelled).
MAX_IMPORT_ATTEMPTS = 5


class DataFlowStagerSettings(BaseModel):
    """Where to import from and to; ``target_root`` is a directory inside the data flow's fileset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alibaba_cloud_conn_id: str = ALIBABA_CLOUD_DEFAULT_CONN_ID
    file_system_id: Annotated[
        str,
        Field(
            min_length=1, json_schema_extra=field_fix("give the CPFS file system id, cpfs-... or bmcpfs-...")
        ),
    ]
    data_flow_id: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("give the id of the data flow from OSS, df-..."))
    ]
    source_uri: Annotated[
        str, Field(pattern=r"^oss://", json_schema_extra=field_fix("use oss://bucket/prefix/"))
    ]
    target_root: Annotated[
        str, Field(pattern=r"^/", json_schema_extra=field_fix("an absolute directory inside the file system"))
    ]
    version: Annotated[str, Field(pattern=DATASET_VERSION_PATTERN)]


class DataFlowStager:
    """RemoteRun over a CPFS data flow import task."""

    mode: ClassVar[str] = "dataflow"

    def __init__(self, **config: Any) -> None:
        self.settings = validate_record(DataFlowStagerSettings, config)

    def _hook(self) -> NasHook:
        from aliyun_training.hooks.alibaba_cloud import shared_hook
        from aliyun_training.hooks.nas import NasHook

        return shared_hook(NasHook, self.settings.alibaba_cloud_conn_id)

    def _listing(self) -> list[SourceObject]:
        from aliyun_training.staging.oss import OssClientConfig, OssObjectSource

        config = OssClientConfig.from_connection(self.settings.alibaba_cloud_conn_id)
        source = OssObjectSource(self.settings.source_uri, config=config)
        objects = source.list()
        if not objects:
            raise SpecError(
                f"source_uri: no objects under {source.uri} (fix: upload the dataset version first)"
            )
        return objects

    def submit(self) -> dict[str, Any]:
        from aliyun_training.oss_location import parse_oss_uri
        from aliyun_training.staging.dataflow_api import find_data_flow

        settings = self.settings
        hook = self._hook()
        flow = find_data_flow(hook, settings.file_system_id, settings.data_flow_id)
        source = parse_oss_uri(settings.source_uri)
        directory = _relative_directory(
            f"oss://{source.bucket}/{source.prefix}", flow.source_uri, "source_uri"
        )
        destination = _relative_directory(
            posixpath.join(settings.target_root, settings.version) + "/", flow.file_system_path, "target_root"
        )
        objects = self._listing()
        checksum = listing_checksum(objects)
        token = hashlib.sha256(
            "\n".join((settings.file_system_id, flow.id, directory, destination, checksum)).encode()
        ).hexdigest()[:40]
        task_id = self._live_import(hook, flow.id, directory, destination, token)
        return {
            "task_id": task_id,
            "files": len(objects),
            "bytes": sum(o.size for o in objects),
            "checksum": checksum,
        }

    def _live_import(self, hook: NasHook, flow_id: str, directory: str, destination: str, token: str) -> str:
        """The import task for this input that can still succeed.

        The ClientToken answers the same task to every retry, including one that failed or was
        cancelled (a timeout stops it); such a task is succeeded by a new one under the next token.
        """
        from aliyun_training.staging.dataflow_api import create_import_task, describe_task

        for attempt in range(MAX_IMPORT_ATTEMPTS):
            task_id = create_import_task(
                hook,
                file_system_id=self.settings.file_system_id,
                data_flow_id=flow_id,
                directory=directory,
                dst_directory=destination,
                client_token=f"stage-{token}" + (f"-r{attempt}" if attempt else ""),
            )
            task = describe_task(hook, self.settings.file_system_id, task_id)
            if not task.finished or task.succeeded:
                return task_id
        raise StagingError(
            f"the last {MAX_IMPORT_ATTEMPTS} import tasks of {self.settings.source_uri} ended failed or "
            f"cancelled (last: {task_id} {task.status}: {task.error_message}); check the data flow"
        )

    async def apoll(self, handle: dict[str, Any]) -> RemoteStatus:
        from aliyun_training.staging.dataflow_api import describe_task_async

        task = await describe_task_async(self._hook(), self.settings.file_system_id, handle["task_id"])
        progress = (
            f"Data flow task {task.task_id} {task.status}: {task.files_done}/{task.files_total} files, "
            f"{task.bytes_done / 1e6:.1f}/{task.bytes_total / 1e6:.1f} MB, "
            f"{task.average_speed / 1e6:.1f} MB/s"
        )
        if task.status == "Completed":
            return RemoteStatus("succeeded", progress=progress)
        if task.finished:
            reason = task.error_message or "no error message"
            return RemoteStatus("failed", message=f"import task {task.task_id} {task.status}: {reason}")
        return RemoteStatus("running", progress=progress)

    def result(self, handle: dict[str, Any]) -> StagedDataset:
        """Check the finished task against the listing taken at submit time, and the source again."""
        from aliyun_training.staging.dataflow_api import describe_task

        task = describe_task(self._hook(), self.settings.file_system_id, handle["task_id"])
        if (task.files_done, task.bytes_done) != (handle["files"], handle["bytes"]):
            raise StagingError(
                f"import task {task.task_id} copied {task.files_done} files / {task.bytes_done} bytes, "
                f"but the source listed {handle['files']} files / {handle['bytes']} bytes; the version "
                "is incomplete — retry the staging"
            )
        if listing_checksum(self._listing()) != handle["checksum"]:
            raise StagingError(
                f"source {self.settings.source_uri} changed during the import; the staged copy may mix "
                "two versions — retry once the dataset version is no longer being written"
            )
        return StagedDataset(
            uri=posixpath.join(self.settings.target_root, self.settings.version),
            version=self.settings.version,
            files=handle["files"],
            bytes=handle["bytes"],
            manifest_uri="",
            checksum=handle["checksum"],
            transferred_files=task.files_done,
            transferred_bytes=task.bytes_done,
            source_uri=self.settings.source_uri,
            mode="dataflow",
        )

    def stop(self, handle: dict[str, Any]) -> None:
        from aliyun_training.staging.dataflow_api import cancel_task

        cancel_task(self._hook(), self.settings.file_system_id, self.settings.data_flow_id, handle["task_id"])


def listing_checksum(objects: list[SourceObject]) -> str:
    """Identity of a source version: sha256 over key, size and ETag of every object."""
    lines = "".join(f"{o.key}\0{o.size}\0{o.etag}\n" for o in sorted(objects, key=lambda o: o.key))
    return hashlib.sha256(lines.encode()).hexdigest()


def _relative_directory(path: str, base: str, field: str) -> str:
    """``path`` relative to ``base`` as the NAS API wants it: ``/a/b/``, or a SpecError naming ``field``."""
    base = base.rstrip("/") + "/"
    if not path.startswith(base):
        raise SpecError(
            f"{field}: {path} is outside the data flow's {base} "
            "(fix: use a location the data flow maps, or a data flow that maps it)"
        )
    return "/" + path[len(base) :].strip("/") + "/"
