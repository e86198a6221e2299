"""What a CPFS data-flow stager needs of the NAS API (OSS -> CPFS import), over ``NasHook``.

A CPFS data flow links a fileset path of the file system (FileSystemPath) with an OSS location
(SourceStorage ``oss://bucket`` + SourceStoragePath). An Import task copies a directory of it onto
CPFS; it runs asynchronously (Pending -> Executing -> Completed, or Failed / Canceling ->
Canceled) and is watched with DescribeDataFlowTasks. Only a data flow in the Running state accepts
tasks, so :func:`find_data_flow` checks that first and says what to fix.

Facts from the NAS SDK (alibabacloud_nas20170626) docstrings, relied on here:

- File system ids start with ``cpfs-`` (general-purpose CPFS) or ``bmcpfs-`` (CPFS for Lingjun).
- CreateDataFlowTask: Directory is relative to SourceStoragePath for Import, DstDirectory relative
  to FileSystemPath; both start and end with ``/`` and may not contain ``/../``.
- ConflictPolicy (SKIP_THE_FILE, KEEP_LATEST, OVERWRITE_EXISTING) "is required when the file system
  type is CPFS for Lingjun". We always send OVERWRITE_EXISTING: a staged version must end up
  exactly as the source, and a same-named file left by an earlier partial import must not
  survive (KEEP_LATEST compares times, SKIP_THE_FILE keeps it).
- CreateDirIfNotExist (Import only, CPFS for Lingjun 2.6.0+) creates a missing destination; it is
  sent only for ``bmcpfs-`` file systems, as general-purpose CPFS does not document it.
- ClientToken (<= 64 ASCII characters) makes the create idempotent: a retried call with the same
  token answers the same task instead of starting a second import.
- Id filters match parts of ids and listings come in pages: ``NasHook`` compares exactly and
  reads every page.

:func:`import_task_request` builds the CreateDataFlowTask request with no call and no connection,
so a dry run can show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.validation import SpecError

if TYPE_CHECKING:
    from aliyun_training.hooks.nas import NasHook

TASK_STATUSES = ("Pending", "Executing", "Failed", "Completed", "Canceling", "Canceled")
FINISHED_STATUSES = frozenset({"Completed", "Failed", "Canceled"})
CONFLICT_POLICY = "OVERWRITE_EXISTING"
DATA_TYPE = "MetaAndData"
MAX_PATH = 1023


class DataFlowTaskNotFoundError(LookupError):
    """DescribeDataFlowTasks does not list the task (wrong file system, or not created)."""


@dataclass(frozen=True)
class DataFlowInfo:
    """A data flow: where on CPFS (``file_system_path``) it maps which OSS location."""

    id: str
    status: str
    file_system_path: str
    source_storage: str
    source_storage_path: str = "/"

    @property
    def source_uri(self) -> str:
        """``oss://bucket/path/``: SourceStorage joined with SourceStoragePath."""
        path = self.source_storage_path.strip("/")
        return f"{self.source_storage.rstrip('/')}/{path}/" if path else f"{self.source_storage.rstrip('/')}/"


@dataclass(frozen=True)
class DataFlowTaskInfo:
    """One task's state and progress (ProgressStats); speeds in bytes per second."""

    task_id: str
    status: str
    error_message: str
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    average_speed: int
    remain_time: int | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "Completed"


def find_data_flow(hook: NasHook, file_system_id: str, data_flow_id: str) -> DataFlowInfo:
    """The data flow, which must exist on the file system and be Running (else a SpecError)."""
    try:
        flow = hook.find_data_flow(file_system_id, data_flow_id)
    except AlibabaCloudApiError as exc:
        if exc.code.startswith("InvalidFileSystem"):
            raise SpecError(
                f"file_system_id: CPFS file system {file_system_id} does not exist in region {hook.region} "
                "(fix: give the id of the file system, cpfs-... or bmcpfs-..., in the connection's region)"
            ) from exc
        raise
    if flow is None:
        raise SpecError(
            f"data_flow_id: data flow {data_flow_id} does not exist on {file_system_id} "
            "(fix: create a data flow from the OSS bucket to the file system in the CPFS console, "
            "or set data_flow_id to an existing one)"
        )
    info = DataFlowInfo(
        id=flow.data_flow_id,
        status=flow.status or "",
        file_system_path=flow.file_system_path or "/",
        source_storage=flow.source_storage or "",
        source_storage_path=flow.source_storage_path or "/",
    )
    if info.status != "Running":
        raise SpecError(
            f"data_flow_id: data flow {data_flow_id} on {file_system_id} is {info.status or 'in no state'}, "
            "not Running: only a Running data flow accepts import tasks "
            "(fix: start it with StartDataFlow or wait until it is Running; repair a Misconfigured one "
            "in the CPFS console)"
        )
    return info


def import_task_request(
    *, file_system_id: str, data_flow_id: str, directory: str, dst_directory: str, client_token: str
) -> Any:
    """The CreateDataFlowTask request that imports ``directory`` (of the flow's OSS path) into
    ``dst_directory``; a SpecError naming the field when a directory or the token is malformed.

    Pure: no call, no connection, no secret.
    """
    from alibabacloud_nas20170626 import models

    _check_directory("directory", directory)
    _check_directory("dst_directory", dst_directory)
    if not client_token or len(client_token) > 64 or not client_token.isascii():
        raise SpecError(
            f"client_token: {client_token!r} must be 1-64 ASCII characters "
            "(fix: derive it from the run id and dataset version, e.g. a hash)"
        )
    return models.CreateDataFlowTaskRequest(
        file_system_id=file_system_id,
        data_flow_id=data_flow_id,
        task_action="Import",
        data_type=DATA_TYPE,
        directory=directory,
        dst_directory=dst_directory,
        conflict_policy=CONFLICT_POLICY,
        create_dir_if_not_exist=True if file_system_id.startswith("bmcpfs-") else None,
        client_token=client_token,
    )


def create_import_task(
    hook: NasHook,
    *,
    file_system_id: str,
    data_flow_id: str,
    directory: str,
    dst_directory: str,
    client_token: str,
) -> str:
    """Start importing ``directory`` (of the flow's OSS path) into ``dst_directory``; the task id.

    ``client_token`` must be the same on every retry of the same import (e.g. derived from the run
    and the dataset version), so that however often the call is repeated one task exists.
    """
    request = import_task_request(
        file_system_id=file_system_id,
        data_flow_id=data_flow_id,
        directory=directory,
        dst_directory=dst_directory,
        client_token=client_token,
    )
    return hook.create_data_flow_task(request)


def describe_task(hook: NasHook, file_system_id: str, task_id: str) -> DataFlowTaskInfo:
    """The task's status and progress."""
    return _task_info(hook.find_data_flow_task(file_system_id, task_id), file_system_id, task_id)


async def describe_task_async(hook: NasHook, file_system_id: str, task_id: str) -> DataFlowTaskInfo:
    """The async twin of :func:`describe_task`, for triggers (no thread, no blocking)."""
    return _task_info(await hook.afind_data_flow_task(file_system_id, task_id), file_system_id, task_id)


def cancel_task(hook: NasHook, file_system_id: str, data_flow_id: str, task_id: str) -> None:
    """Ask the service to cancel the task (it goes Canceling, then Canceled)."""
    hook.cancel_data_flow_task(file_system_id, data_flow_id, task_id)


async def cancel_task_async(hook: NasHook, file_system_id: str, data_flow_id: str, task_id: str) -> None:
    """The async twin of :func:`cancel_task`, for a trigger's ``on_kill``."""
    await hook.acancel_data_flow_task(file_system_id, data_flow_id, task_id)


def _check_directory(field: str, value: str) -> None:
    """The SDK's rule for Directory/DstDirectory, checked before any call so the field is named."""
    if not value.startswith("/") or not value.endswith("/") or not 1 <= len(value) <= MAX_PATH:
        raise SpecError(
            f"{field}: {value!r} must start and end with '/' and be at most {MAX_PATH} characters "
            "(fix: e.g. /datasets/cifar10/2026-11-22/)"
        )
    if "/../" in value or "/./" in value:
        raise SpecError(f"{field}: {value!r} must not contain /../ or /./ (fix: give the plain directory)")


def _task_info(task: Any, file_system_id: str, task_id: str) -> DataFlowTaskInfo:
    if task is None:
        raise DataFlowTaskNotFoundError(
            f"data flow task {task_id} is not listed on file system {file_system_id}"
        )
    stats = task.progress_stats
    return DataFlowTaskInfo(
        task_id=task.task_id,
        status=task.status or "",
        error_message=task.error_msg or "",
        files_done=(stats.files_done or 0) if stats else 0,
        files_total=(stats.files_total or 0) if stats else 0,
        bytes_done=(stats.bytes_done or 0) if stats else 0,
        bytes_total=(stats.bytes_total or 0) if stats else 0,
        average_speed=(stats.average_speed or 0) if stats else 0,
        remain_time=stats.remain_time if stats else None,
    )
