"""NAS 2017-06-26 emulator: CPFS data flows importing an object store onto a local directory (RPC).

The test gives the emulator ``filesystem_root`` (a local directory standing in for the CPFS file
system) and ``read_source(bucket, prefix) -> {relative key: content}`` wired to its object store;
data flows are made in setup with :meth:`NasDataFlowEmulator.add_data_flow`. An Import task reads
the source when it starts and writes the files under ``filesystem_root / FileSystemPath /
DstDirectory`` when it completes, so a stager can be tested end to end.

Actions and wire names are the SDK's (alibabacloud_nas20170626 3.7.5), all ``POST /`` RPC with the
parameters in the query: DescribeDataFlows (FileSystemId, Filters.N.Key/Value, MaxResults,
NextToken), CreateDataFlowTask (FileSystemId, DataFlowId, TaskAction, DataType, Directory,
DstDirectory, ConflictPolicy, CreateDirIfNotExist, ClientToken, DryRun), DescribeDataFlowTasks
(FileSystemId, Filters.N.Key/Value, MaxResults, NextToken, WithReports) and CancelDataFlowTask
(FileSystemId, DataFlowId, TaskId, ClientToken, DryRun). Query parameters the SDK's request model
does not know are refused.

Facts from the SDK docstrings and the CPFS API reference:

- Task statuses: ``Pending``, ``Executing``, ``Failed``, ``Completed``, ``Canceling``, ``Canceled``
  (the Status filter of DescribeDataFlowTasks). Only Pending or Executing tasks can be canceled.
- A task can be created only on a data flow in the ``Running`` state. Data flow statuses (CPFS API
  reference; the SDK does not list them): Starting, Running, Updating, Deleting, Stopping,
  Stopped, Misconfigured.
- TaskAction: Import, Export, StreamImport, StreamExport, Evict, Inventory; CPFS for Lingjun
  (``bmcpfs-``) supports only Import, Export, StreamImport, StreamExport. DataType: Metadata, Data,
  MetaAndData. ConflictPolicy: SKIP_THE_FILE, KEEP_LATEST, OVERWRITE_EXISTING, "required when the
  file system type is CPFS for Lingjun".
- Directory (relative to the data flow's SourceStoragePath for Import) and DstDirectory (relative
  to its FileSystemPath) must be 1-1023 characters, start and end with ``/``; DstDirectory "cannot
  contain /../" (the emulator refuses it in Directory too: it would leave the source path).
- SourceStorage is ``oss://<bucket>`` and SourceStoragePath the path inside it (``/prefix/``).
- Filters on ids match "a data flow ID or part of a data flow ID", comma-separated, up to 10:
  callers must compare ids exactly themselves. MaxResults is 10-100, default 20.
- ClientToken makes CreateDataFlowTask idempotent: the same token with the same parameters answers
  the same TaskId; with other parameters, 400 ``IdempotentParameterMismatch`` (the code Alibaba
  Cloud uses for idempotence tokens). DryRun validates and answers an empty TaskId.

Decisions where the service's behaviour is not documented:

- Lifecycle over ``self.clock``: Pending for ``pending_seconds``, Executing for ``task_seconds``
  (FilesDone/BytesDone grow linearly, RemainTime counts down), then Completed, or Failed with the
  ErrorMsg of :meth:`fail_next_task`. Canceling lasts ``cancel_seconds``, then Canceled (no files
  written). States advance whenever a request arrives or :meth:`advance` is called.
- The source is read when the task starts executing. A task fails (ErrorMsg set) when reading
  raises, when there is no object under the directory, when a key would escape the destination,
  or when the destination directory does not exist and CreateDirIfNotExist is not true.
- DstDirectory defaults to Directory; DataType defaults to MetaAndData; ConflictPolicy defaults to
  KEEP_LATEST on general-purpose CPFS. Source objects have no modification time here, so
  KEEP_LATEST keeps an existing file only when its content is identical; SKIP_THE_FILE keeps any
  existing file; OVERWRITE_EXISTING always writes. ActualFiles/ActualBytes count what was written.
- AverageSpeed is bytes per second, RemainTime seconds, Progress a percentage (0-100).
- Codes: no FileSystemId / DataFlowId / TaskId: 400 ``MissingFileSystemId`` / ``MissingDataFlowId``
  / ``MissingTaskId`` (as the CPFS reference spells them); unknown file system: 404
  ``InvalidFileSystem.NotFound``; unknown data flow: 404 ``InvalidDataFlow.NotFound``; unknown task:
  404 ``InvalidTaskId.NotFound``; data flow not Running: 403 ``InvalidStatus.DataFlow``; canceling a
  task that is not Pending/Executing: 403 ``InvalidStatus.ResourceMismatch``; a bad value: 400
  ``InvalidParameter.<Name>``; EntryList, TransferFileListPath, SrcTaskId, Includes and task
  actions other than Import are refused as not emulated (400 ``InvalidParameter``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from alibabacloud_nas20170626 import models as nas_models

from fakes.base import ApiError, ApiRequest, Handler, iso_utc, query_checked
from fakes.ram import RamAuthorizedEmulator

SourceReader = Callable[[str, str], dict[str, bytes]]

TASK_STATUSES = ("Pending", "Executing", "Failed", "Completed", "Canceling", "Canceled")
CANCELABLE = frozenset({"Pending", "Executing"})
DATA_FLOW_STATUSES = ("Starting", "Running", "Updating", "Deleting", "Stopping", "Stopped", "Misconfigured")
TASK_ACTIONS = frozenset({"Import", "Export", "StreamImport", "StreamExport", "Evict", "Inventory"})
LINGJUN_TASK_ACTIONS = frozenset({"Import", "Export", "StreamImport", "StreamExport"})
DATA_TYPES = frozenset({"Metadata", "Data", "MetaAndData"})
CONFLICT_POLICIES = frozenset({"SKIP_THE_FILE", "KEEP_LATEST", "OVERWRITE_EXISTING"})
NOT_EMULATED = ("EntryList", "TransferFileListPath", "SrcTaskId", "Includes")
DATA_FLOW_FILTERS = frozenset(
    {"DataFlowIds", "Status", "FileSystemPath", "SourceStorage", "SourceStoragePath"}
)
TASK_FILTERS = frozenset({"DataFlowIds", "TaskIds", "Status", "TaskActions", "DataTypes", "Originator"})
DEFAULT_MAX_RESULTS = 20
MAX_PATH = 1023


@dataclass
class EmulatedDataFlow:
    file_system_id: str
    data_flow_id: str
    file_system_path: str
    bucket: str
    source_storage_path: str
    status: str
    created_at: float
    description: str = ""
    throughput: int = 600

    @property
    def source_storage(self) -> str:
        return f"oss://{self.bucket}"


@dataclass
class EmulatedTask:
    task_id: str
    file_system_id: str
    data_flow_id: str
    task_action: str
    data_type: str
    directory: str
    dst_directory: str
    conflict_policy: str
    create_dir: bool
    created_at: float
    fail_with: str | None = None
    status: str = "Pending"
    error_msg: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    cancel_at: float | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    actual_files: int = 0
    actual_bytes: int = 0

    @property
    def files_total(self) -> int:
        return len(self.files)

    @property
    def bytes_total(self) -> int:
        return sum(len(data) for data in self.files.values())


class NasDataFlowEmulator(RamAuthorizedEmulator):
    """NAS: DescribeDataFlows, CreateDataFlowTask, DescribeDataFlowTasks, CancelDataFlowTask."""

    api_version = "2017-06-26"

    def __init__(
        self,
        filesystem_root: Path,
        read_source: SourceReader,
        access_keys: Mapping[str, str | None] | None = None,
        pending_seconds: float = 1.0,
        task_seconds: float = 5.0,
        cancel_seconds: float = 1.0,
    ) -> None:
        super().__init__(access_keys)
        self.filesystem_root = Path(filesystem_root)
        self.read_source = read_source
        self.pending_seconds = pending_seconds
        self.task_seconds = task_seconds
        self.cancel_seconds = cancel_seconds
        self.data_flows: dict[tuple[str, str], EmulatedDataFlow] = {}
        self.tasks: dict[str, EmulatedTask] = {}
        self._failures: list[str] = []
        self._create_tokens: dict[tuple[str, str], tuple[str, str]] = {}
        self._numbers = itertools.count(1)
        actions = {
            "DescribeDataFlows": (self._describe_data_flows, nas_models.DescribeDataFlowsResponseBody),
            "CreateDataFlowTask": (self._create_data_flow_task, nas_models.CreateDataFlowTaskResponseBody),
            "DescribeDataFlowTasks": (
                self._describe_data_flow_tasks,
                nas_models.DescribeDataFlowTasksResponseBody,
            ),
            "CancelDataFlowTask": (self._cancel_data_flow_task, nas_models.CancelDataFlowTaskResponseBody),
        }
        self._request_models = {
            "DescribeDataFlows": nas_models.DescribeDataFlowsRequest,
            "CreateDataFlowTask": nas_models.CreateDataFlowTaskRequest,
            "DescribeDataFlowTasks": nas_models.DescribeDataFlowTasksRequest,
            "CancelDataFlowTask": nas_models.CancelDataFlowTaskRequest,
        }
        for action, (handler, model) in actions.items():
            self.add_rpc_action(action, self._checked(handler), model)

    # ----------------------------------------------------------------------------- setup

    def add_data_flow(
        self,
        file_system_id: str,
        data_flow_id: str,
        file_system_path: str = "/",
        source_storage: str = "oss://bucket/prefix/",
        status: str = "Running",
        source_storage_path: str | None = None,
    ) -> EmulatedDataFlow:
        """A data flow between ``source_storage`` (``oss://bucket[/path/]``) and a fileset path.

        A path in ``source_storage`` becomes the SourceStoragePath unless one is given.
        """
        if not source_storage.startswith("oss://"):
            raise ValueError("source_storage must be oss://bucket[/path/]")
        if status not in DATA_FLOW_STATUSES:
            raise ValueError(f"status must be one of {DATA_FLOW_STATUSES}")
        bucket, _, path = source_storage.removeprefix("oss://").partition("/")
        storage_path = source_storage_path or _as_dir(path)
        with self._lock:
            flow = EmulatedDataFlow(
                file_system_id,
                data_flow_id,
                _as_dir(file_system_path),
                bucket,
                storage_path,
                status,
                self.clock(),
            )
            self.data_flows[(file_system_id, data_flow_id)] = flow
            return flow

    def set_data_flow_status(self, file_system_id: str, data_flow_id: str, status: str) -> None:
        if status not in DATA_FLOW_STATUSES:
            raise ValueError(f"status must be one of {DATA_FLOW_STATUSES}")
        with self._lock:
            self.data_flows[(file_system_id, data_flow_id)].status = status

    def fail_next_task(self, error_msg: str = "Failed to read the source storage: AccessDenied") -> None:
        """Make the next created task end Failed with ``error_msg`` instead of Completed."""
        with self._lock:
            self._failures.append(error_msg)

    def advance(self) -> None:
        """Move every task along the clock now (requests do this too)."""
        with self._lock:
            for task in self.tasks.values():
                self._advance(task)

    def file_system_dir(self, file_system_id: str, path: str = "/") -> Path:
        """Where ``path`` of the emulated file system lives on this machine."""
        del file_system_id  # one local root stands in for every file system
        return self.filesystem_root / path.strip("/")

    # ----------------------------------------------------------------------------- lifecycle

    def _advance(self, task: EmulatedTask) -> None:
        now = self.clock()
        if task.status == "Pending" and now >= task.created_at + self.pending_seconds:
            task.started_at = task.created_at + self.pending_seconds
            task.status = "Executing"
            self._load_source(task)
        started = task.started_at
        if task.status == "Executing" and started is not None and now >= started + self.task_seconds:
            self._finish(task, started + self.task_seconds)
        if (
            task.status == "Canceling"
            and task.cancel_at is not None
            and now >= task.cancel_at + self.cancel_seconds
        ):
            task.status = "Canceled"
            task.ended_at = task.cancel_at + self.cancel_seconds

    def _advance_all(self) -> None:
        """Tasks progress by the clock, so every request first brings them all up to now."""
        for task in self.tasks.values():
            self._advance(task)

    def _load_source(self, task: EmulatedTask) -> None:
        flow = self.data_flows[(task.file_system_id, task.data_flow_id)]
        prefix = (flow.source_storage_path.strip("/") + "/" + task.directory.strip("/")).strip("/")
        prefix = f"{prefix}/" if prefix else ""
        try:
            task.files = dict(self.read_source(flow.bucket, prefix))
        except Exception as exc:
            self._fail(task, f"Failed to read oss://{flow.bucket}/{prefix}: {exc}", task.started_at)
            return
        if not task.files:
            self._fail(
                task, f"The source directory oss://{flow.bucket}/{prefix} has no objects.", task.started_at
            )
            return
        bad = next((key for key in task.files if not _safe_key(key)), None)
        if bad is not None:
            self._fail(task, f"The object key {bad!r} is not a valid relative file path.", task.started_at)
            return
        if not task.create_dir and not self._destination(task, flow).is_dir():
            self._fail(
                task,
                f"The destination directory {task.dst_directory} does not exist in {flow.file_system_path} "
                "(set CreateDirIfNotExist=true or create it).",
                task.started_at,
            )

    def _finish(self, task: EmulatedTask, at: float) -> None:
        if task.fail_with is not None:
            self._fail(task, task.fail_with, at)
            return
        flow = self.data_flows[(task.file_system_id, task.data_flow_id)]
        destination = self._destination(task, flow)
        for key, data in sorted(task.files.items()):
            target = destination / key
            if target.exists() and _keep_existing(task.conflict_policy, target, data):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            task.actual_files += 1
            task.actual_bytes += len(data)
        task.status = "Completed"
        task.ended_at = at

    def _fail(self, task: EmulatedTask, message: str, at: float | None) -> None:
        task.status = "Failed"
        task.error_msg = message
        task.ended_at = at if at is not None else self.clock()

    def _destination(self, task: EmulatedTask, flow: EmulatedDataFlow) -> Path:
        return self.file_system_dir(flow.file_system_id, flow.file_system_path) / task.dst_directory.strip(
            "/"
        )

    # ----------------------------------------------------------------------------- handlers

    def _checked(self, handler: Handler) -> Handler:
        """Refuse parameters the SDK could not have sent, then advance every task before answering."""
        return query_checked(handler, self._request_models, _unflatten, self._advance_all)

    def _describe_data_flows(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        file_system_id = self._file_system(query)
        filters = _filters(query, DATA_FLOW_FILTERS)
        flows = [
            f
            for f in self.data_flows.values()
            if f.file_system_id == file_system_id
            and _match(filters, "DataFlowIds", f.data_flow_id, partial=True)
            and _match(filters, "Status", f.status)
            and _match(filters, "FileSystemPath", f.file_system_path, partial=True)
            and _match(filters, "SourceStorage", f.source_storage, partial=True)
            and _match(filters, "SourceStoragePath", f.source_storage_path, partial=True)
        ]
        page, next_token = _page(flows, query)
        body: dict[str, Any] = {"DataFlowInfo": {"DataFlow": [_flow_view(f) for f in page]}}
        if next_token:
            body["NextToken"] = next_token
        return body

    def _create_data_flow_task(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        file_system_id = self._file_system(query)
        flow = self._data_flow(file_system_id, query)
        for name in NOT_EMULATED:
            if query.get(name):
                raise ApiError(400, "InvalidParameter", f"The parameter {name} is not emulated.")
        params = self._task_params(file_system_id, query)
        if flow.status != "Running":
            raise ApiError(
                403,
                "InvalidStatus.DataFlow",
                f"The data flow {flow.data_flow_id} is {flow.status}; tasks need a Running data flow.",
            )
        token = query.get("ClientToken", "")
        if len(token) > 64 or not token.isascii():
            raise _invalid("ClientToken", "must be at most 64 ASCII characters")
        signature = json.dumps({"DataFlowId": flow.data_flow_id, **params}, sort_keys=True)
        if _truthy(query.get("DryRun")):
            return {"TaskId": ""}
        if token and (file_system_id, token) in self._create_tokens:
            known_signature, task_id = self._create_tokens[(file_system_id, token)]
            if known_signature != signature:
                raise ApiError(
                    400,
                    "IdempotentParameterMismatch",
                    "The request uses the same client token as a previous, but non-identical request.",
                )
            return {"TaskId": task_id}
        task = EmulatedTask(
            task_id=self._new_task_id(),
            file_system_id=file_system_id,
            data_flow_id=flow.data_flow_id,
            created_at=self.clock(),
            fail_with=self._failures.pop(0) if self._failures else None,
            **params,
        )
        self.tasks[task.task_id] = task
        if token:
            self._create_tokens[(file_system_id, token)] = (signature, task.task_id)
        return {"TaskId": task.task_id}

    def _task_params(self, file_system_id: str, query: Mapping[str, str]) -> dict[str, Any]:
        """TaskAction, DataType, Directory, DstDirectory, ConflictPolicy, CreateDirIfNotExist, validated."""
        lingjun = file_system_id.startswith("bmcpfs-")
        action = query.get("TaskAction", "")
        if action not in TASK_ACTIONS or (lingjun and action not in LINGJUN_TASK_ACTIONS):
            allowed = sorted(LINGJUN_TASK_ACTIONS if lingjun else TASK_ACTIONS)
            raise _invalid("TaskAction", f"{action!r} is not one of {allowed}")
        if action != "Import":
            raise ApiError(400, "InvalidParameter", f"TaskAction {action} is not emulated (only Import).")
        data_type = query.get("DataType", "MetaAndData")
        if data_type not in DATA_TYPES:
            raise _invalid("DataType", f"{data_type!r} is not one of {sorted(DATA_TYPES)}")
        directory = _directory(query, "Directory", required=True)
        dst_directory = _directory(query, "DstDirectory", required=False) or directory
        policy = query.get("ConflictPolicy")
        if policy is None and lingjun:
            raise _invalid("ConflictPolicy", "is required for CPFS for Lingjun")
        if policy is not None and policy not in CONFLICT_POLICIES:
            raise _invalid("ConflictPolicy", f"{policy!r} is not one of {sorted(CONFLICT_POLICIES)}")
        return {
            "task_action": action,
            "data_type": data_type,
            "directory": directory,
            "dst_directory": dst_directory,
            "conflict_policy": policy or "KEEP_LATEST",
            "create_dir": _truthy(query.get("CreateDirIfNotExist")),
        }

    def _describe_data_flow_tasks(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        file_system_id = self._file_system(query)
        filters = _filters(query, TASK_FILTERS)
        tasks = [
            t
            for t in self.tasks.values()
            if t.file_system_id == file_system_id
            and _match(filters, "DataFlowIds", t.data_flow_id, partial=True)
            and _match(filters, "TaskIds", t.task_id, partial=True)
            and _match(filters, "Status", t.status)
            and _match(filters, "TaskActions", t.task_action)
            and _match(filters, "DataTypes", t.data_type)
            and _match(filters, "Originator", "User")
        ]
        page, next_token = _page(tasks, query)
        body: dict[str, Any] = {"TaskInfo": {"Task": [self._task_view(t) for t in page]}}
        if next_token:
            body["NextToken"] = next_token
        return body

    def _cancel_data_flow_task(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        file_system_id = self._file_system(query)
        flow = self._data_flow(file_system_id, query)
        task_id = query.get("TaskId")
        if not task_id:
            raise ApiError(400, "MissingTaskId", "TaskId is mandatory for this action.")
        task = self.tasks.get(task_id)
        if task is None or task.file_system_id != file_system_id or task.data_flow_id != flow.data_flow_id:
            raise ApiError(404, "InvalidTaskId.NotFound", f"The data flow task {task_id} does not exist.")
        if task.status not in CANCELABLE:
            raise ApiError(
                403,
                "InvalidStatus.ResourceMismatch",
                f"The data flow task {task_id} is {task.status}; "
                "only Pending or Executing tasks can be canceled.",
            )
        if not _truthy(query.get("DryRun")):
            task.status = "Canceling"
            task.cancel_at = self.clock()
        return {}

    # ----------------------------------------------------------------------------- helpers

    def _file_system(self, query: Mapping[str, str]) -> str:
        file_system_id = query.get("FileSystemId")
        if not file_system_id:
            raise ApiError(400, "MissingFileSystemId", "FileSystemId is mandatory for this action.")
        if not any(f.file_system_id == file_system_id for f in self.data_flows.values()):
            raise ApiError(
                404, "InvalidFileSystem.NotFound", f"The file system {file_system_id} does not exist."
            )
        return file_system_id

    def _data_flow(self, file_system_id: str, query: Mapping[str, str]) -> EmulatedDataFlow:
        data_flow_id = query.get("DataFlowId")
        if not data_flow_id:
            raise ApiError(400, "MissingDataFlowId", "DataFlowId is mandatory for this action.")
        flow = self.data_flows.get((file_system_id, data_flow_id))
        if flow is None:
            raise ApiError(404, "InvalidDataFlow.NotFound", f"The data flow {data_flow_id} does not exist.")
        return flow

    def _new_task_id(self) -> str:
        """``task-`` and 16 hex digits, like the service's task ids."""
        return "task-" + hashlib.sha256(f"task/{next(self._numbers)}".encode()).hexdigest()[:16]

    def _task_view(self, task: EmulatedTask) -> dict[str, Any]:
        flow = self.data_flows[(task.file_system_id, task.data_flow_id)]
        view: dict[str, Any] = {
            "TaskId": task.task_id,
            "DataFlowId": task.data_flow_id,
            "FilesystemId": task.file_system_id,
            "FileSystemPath": flow.file_system_path,
            "SourceStorage": flow.source_storage,
            "TaskAction": task.task_action,
            "DataType": task.data_type,
            "Directory": task.directory,
            "DstDirectory": task.dst_directory,
            "ConflictPolicy": task.conflict_policy,
            "Originator": "User",
            "Status": task.status,
            "CreateTime": iso_utc(task.created_at),
        }
        if task.started_at is not None:
            view["StartTime"] = iso_utc(task.started_at)
        if task.ended_at is not None:
            view["EndTime"] = iso_utc(task.ended_at)
        if task.error_msg:
            view["ErrorMsg"] = task.error_msg
        view.update(self._progress(task))
        return view

    def _progress(self, task: EmulatedTask) -> dict[str, Any]:
        """Progress (percent) and ProgressStats: linear over ``task_seconds`` while Executing."""
        if task.started_at is None:
            fraction, elapsed = 0.0, 0.0
        elif task.status == "Completed":
            fraction, elapsed = 1.0, self.task_seconds
        else:
            end = task.ended_at if task.ended_at is not None else self.clock()
            elapsed = max(0.0, min(end - task.started_at, self.task_seconds))
            fraction = elapsed / self.task_seconds if self.task_seconds else 1.0
            if task.status != "Executing":
                fraction = min(fraction, 0.99)
        bytes_done = int(task.bytes_total * fraction)
        remaining = 0 if task.status != "Executing" else math.ceil(self.task_seconds - elapsed)
        stats = {
            "FilesTotal": task.files_total,
            "FilesDone": int(task.files_total * fraction),
            "BytesTotal": task.bytes_total,
            "BytesDone": bytes_done,
            "ActualFiles": task.actual_files,
            "ActualBytes": task.actual_bytes,
            "AverageSpeed": int(bytes_done / elapsed) if elapsed > 0 else 0,
            "RemainTime": remaining,
        }
        return {"Progress": int(fraction * 100), "ProgressStats": stats}


def _flow_view(flow: EmulatedDataFlow) -> dict[str, Any]:
    return {
        "DataFlowId": flow.data_flow_id,
        "FileSystemId": flow.file_system_id,
        "FileSystemPath": flow.file_system_path,
        "SourceStorage": flow.source_storage,
        "SourceStoragePath": flow.source_storage_path,
        "SourceSecurityType": "NONE",
        "Status": flow.status,
        "Throughput": flow.throughput,
        "Description": flow.description,
        "CreateTime": iso_utc(flow.created_at),
        "UpdateTime": iso_utc(flow.created_at),
    }


def _unflatten(query: Mapping[str, str]) -> dict[str, Any]:
    """``Filters.1.Key=a`` -> ``{"Filters": [{"Key": "a"}]}``: the shape the SDK model maps from."""
    nested: dict[str, Any] = {}
    lists: dict[str, dict[int, dict[str, str]]] = {}
    for key, value in query.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[1].isdigit():
            lists.setdefault(parts[0], {}).setdefault(int(parts[1]), {})[parts[2]] = value
        else:
            nested[key] = value
    for name, items in lists.items():
        nested[name] = [items[i] for i in sorted(items)]
    return nested


def _filters(query: Mapping[str, str], supported: frozenset[str]) -> dict[str, list[str]]:
    """The Filters.N.Key/Value pairs as key -> values; keys that are not emulated are refused."""
    filters: dict[str, list[str]] = {}
    for item in _unflatten(query).get("Filters", []):
        key, value = item.get("Key", ""), item.get("Value", "")
        if key not in supported:
            raise ApiError(400, "InvalidParameter", f"The filter key {key!r} is not emulated.")
        values = [v.strip() for v in value.split(",") if v.strip()]
        if len(values) > 10:
            raise _invalid("Filters", f"at most 10 values for {key}")
        filters[key] = values
    return filters


def _match(filters: Mapping[str, list[str]], key: str, value: str, partial: bool = False) -> bool:
    wanted = filters.get(key)
    if not wanted:
        return True
    return any((w in value) if partial else (w == value) for w in wanted)


def _page(items: list[Any], query: Mapping[str, str]) -> tuple[list[Any], str]:
    """One page of MaxResults items from NextToken on, and the token of the next page ('' at the end)."""
    try:
        size = int(query.get("MaxResults") or DEFAULT_MAX_RESULTS)
    except ValueError as exc:
        raise _invalid("MaxResults", "must be an integer") from exc
    if not 10 <= size <= 100:
        raise _invalid("MaxResults", "must be in [10, 100]")
    token = query.get("NextToken") or ""
    try:
        start = int(token.removeprefix("next-"), 16) if token else 0
    except ValueError as exc:
        raise _invalid("NextToken", f"{token!r} was not issued by this service") from exc
    end = start + size
    return items[start:end], (f"next-{end:08x}" if end < len(items) else "")


def _directory(query: Mapping[str, str], name: str, required: bool) -> str:
    value = query.get(name)
    if not value:
        if required:
            raise _invalid(name, "is required for an Import task")
        return ""
    if not (1 <= len(value) <= MAX_PATH) or not value.startswith("/") or not value.endswith("/"):
        raise _invalid(name, f"{value!r} must be 1-{MAX_PATH} characters starting and ending with '/'")
    if "/../" in value or "/./" in value:
        raise _invalid(name, f"{value!r} must not contain /../")
    return value


def _as_dir(path: str) -> str:
    stripped = path.strip("/")
    return f"/{stripped}/" if stripped else "/"


def _safe_key(key: str) -> bool:
    path = PurePosixPath(key)
    return bool(key) and not path.is_absolute() and ".." not in path.parts and not key.endswith("/")


def _keep_existing(policy: str, target: Path, data: bytes) -> bool:
    if policy == "OVERWRITE_EXISTING":
        return False
    if policy == "SKIP_THE_FILE":
        return True
    return target.read_bytes() == data  # KEEP_LATEST: the source is never older than an equal copy


def _truthy(value: Any) -> bool:
    return str(value).lower() == "true"


def _invalid(name: str, problem: str) -> ApiError:
    return ApiError(400, f"InvalidParameter.{name}", f"The parameter {name} is invalid: {problem}.")
