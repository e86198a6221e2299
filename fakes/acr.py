"""ACR Enterprise Edition (cr 2018-12-01) emulator: repositories, build rules, builds and tags (RPC).

A test sets up one instance (``instance_id``) with :meth:`AcrEmulator.add_repository` and
:meth:`AcrEmulator.add_build_rule`; a build started by CreateBuildRecordByRule then runs a scripted
Docker build over ``self.clock`` and, when it succeeds, the rule's ImageTag appears in the
repository with a digest. :meth:`AcrEmulator.fail_next_build` makes the next build fail at a step.

Actions and wire names are the SDK's (alibabacloud_cr20181201 2.2.5), RPC with the parameters in
the query (all ``POST /`` except GetRepoTag, ``GET /``): GetRepository (InstanceId, RepoId |
RepoNamespaceName + RepoName), ListRepoBuildRule (InstanceId, RepoId, PageNo, PageSize),
UpdateRepoBuildRule (InstanceId, RepoId, BuildRuleId, ImageTag, DockerfileLocation,
DockerfileName, BuildArgs.N, Platforms.N, PushName, PushType), CreateBuildRecordByRule
(InstanceId, RepoId, BuildRuleId), ListRepoBuildRecord (InstanceId, RepoId, PageNo, PageSize),
GetRepoBuildRecord (InstanceId, BuildRecordId), GetRepoBuildRecordStatus (InstanceId, RepoId,
BuildRecordId), ListRepoBuildRecordLog (InstanceId, RepoId, BuildRecordId, Offset),
CancelRepoBuildRecord (InstanceId, RepoId, BuildRecordId) and GetRepoTag (InstanceId, RepoId,
Tag). Query parameters the SDK's request model does not know are refused, and every answer is
checked against the SDK's response model. Answers carry ``Code: "success"`` and ``IsSuccess``.

Decisions where the service's behaviour is not documented (the SDK lists no build statuses, no
log paging rule and no error codes for these actions):

- Build lifecycle: ``PENDING`` for ``pending_seconds``, then ``BUILDING``: a preparation line
  (cloning the bound source at the rule's PushType/PushName), then one Dockerfile step every
  ``step_seconds`` ("Step i/N : INSTRUCTION", " ---> Running in ..." for RUN, " ---> <layer>"),
  then the push, ``push_seconds`` long; then ``SUCCESS`` and the tag exists. A build failing at
  step k prints the step, its output and Docker's "The command '/bin/sh -c ...' returned a
  non-zero code: N" and ends ``FAILED`` when that step would have ended. Canceling a PENDING or
  BUILDING build makes it ``CANCELED`` at once.
- The build record remembers the rule's ImageTag at creation: changing the rule later does not
  change what a running build pushes.
- ListRepoBuildRecordLog: ``Offset`` is the number of lines to skip; at most ``log_page_size``
  lines are answered, LineNumber counts from 1. BuildStage is PREPARE, BUILD or PUSH. Only the
  lines already printed (by the clock) are listed.
- ListRepoBuildRecord lists newest first. ListRepoBuildRecord and ListRepoBuildRule page with
  PageNo (from 1) and PageSize: the SDK and the API reference give neither a default nor a maximum
  (the reference's example PageSize is 30), so the emulator answers 30 by default and refuses a
  PageSize outside 1..100 or a PageNo below 1 (400 ``InvalidParameter``); TotalCount is a string as
  the SDK model types it. GetRepoBuildRecord times are epoch milliseconds.
- GetRepoTag answers Digest as bare hex (``digest_prefix=True``: with ``sha256:``), Status NORMAL.
- Ids: repositories ``crr-``, build rules ``crbr-``, build records ``crbrd-`` + 16 hex digits.
- Errors: a missing required parameter is 400 ``MissingParameter``; an unknown instance,
  repository, rule, record or tag is 404 ``INSTANCE_NOT_EXIST`` / ``REPO_NOT_EXIST`` /
  ``BUILD_RULE_NOT_EXIST`` / ``BUILD_RECORD_NOT_EXIST`` / ``TAG_NOT_EXIST``; canceling a finished
  build is 400 ``BUILD_RECORD_STATUS_INVALID``. With ``soft_errors=True`` these business errors
  are answered instead the way some ACR APIs do: HTTP 200 with that Code and ``IsSuccess: false``.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alibabacloud_cr20181201 import models as cr_models

from fakes.base import ApiError, ApiRequest, Handler, query_checked
from fakes.ram import RamAuthorizedEmulator

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

BUILD_STATUSES = ("PENDING", "BUILDING", "SUCCESS", "FAILED", "CANCELED")
FINISHED = frozenset({"SUCCESS", "FAILED", "CANCELED"})
#: PageSize when none is given: undocumented; 30 is the API reference's example value.
DEFAULT_PAGE_SIZE = 30
MAX_PAGE_SIZE = 100

#: A Lingjun training image's Dockerfile, step by step (step 5 installs the RDMA libraries).
DEFAULT_STEPS = (
    "FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04",
    "ENV DEBIAN_FRONTEND=noninteractive",
    "WORKDIR /opt/training",
    "RUN apt-get update",
    "RUN apt-get install -y --no-install-recommends libnl-3-dev libnl-route-3-dev libnl-3-200 "
    "libnl-route-3-200 iproute2 udev dmidecode ethtool",
    "COPY requirements-training.txt /tmp/requirements-training.txt",
    "RUN pip install --no-cache-dir -r /tmp/requirements-training.txt",
    "COPY include/training /opt/training",
    'CMD ["python3"]',
)


@dataclass
class EmulatedRepository:
    repo_id: str
    namespace: str
    name: str
    created_at: float


@dataclass
class EmulatedBuildRule:
    rule_id: str
    repo_id: str
    image_tag: str
    dockerfile_location: str = "/"
    dockerfile_name: str = "Dockerfile"
    build_args: list[str] = field(default_factory=list)
    platforms: list[str] = field(default_factory=lambda: ["linux/amd64"])
    push_type: str = "GIT_BRANCH"
    push_name: str = "main"


@dataclass
class EmulatedTag:
    tag: str
    digest: str
    created_at: float
    size: int = 5_368_709_120


@dataclass(frozen=True)
class BuildFailure:
    """Where and how the next build fails."""

    at_step: int
    output: tuple[str, ...]
    exit_code: int


@dataclass
class EmulatedBuild:
    record_id: str
    repo_id: str
    rule_id: str
    tag: str
    created_at: float
    #: (time printed, BuildStage, Message), in order.
    script: list[tuple[float, str, str]]
    ends_at: float
    final_status: str
    status: str = "PENDING"
    started_at: float | None = None
    ended_at: float | None = None


class _BusinessError(ApiError):
    """A refusal ACR may answer as HTTP 200 + ``IsSuccess: false`` (``soft_errors``)."""


class AcrEmulator(RamAuthorizedEmulator):
    """ACR Enterprise: one instance, its repositories, build rules, build records and tags."""

    api_version = "2018-12-01"

    def __init__(
        self,
        access_keys: Mapping[str, str | None] | None = None,
        instance_id: str = "cri-emulated0001",
        registry: str = "emulated-registry.cn-wulanchabu.cr.aliyuncs.com",
        pending_seconds: float = 2.0,
        step_seconds: float = 5.0,
        push_seconds: float = 5.0,
        steps: tuple[str, ...] = DEFAULT_STEPS,
        log_page_size: int = 100,
        soft_errors: bool = False,
        digest_prefix: bool = False,
    ) -> None:
        super().__init__(access_keys)
        self.instance_id = instance_id
        self.registry = registry
        self.pending_seconds = pending_seconds
        self.step_seconds = step_seconds
        self.push_seconds = push_seconds
        self.steps = steps
        self.log_page_size = log_page_size
        self.soft_errors = soft_errors
        self.digest_prefix = digest_prefix
        self.repositories: dict[str, EmulatedRepository] = {}
        self.rules: dict[str, EmulatedBuildRule] = {}
        self.builds: dict[str, EmulatedBuild] = {}
        self.tags: dict[tuple[str, str], EmulatedTag] = {}
        #: Called with each tag a successful build pushes: where a test links the instance's registry.
        self.on_push: Callable[[EmulatedRepository, EmulatedTag], None] | None = None
        self._failures: list[BuildFailure] = []
        self._numbers = itertools.count(1)
        m = cr_models
        actions: dict[str, tuple[Callable[[ApiRequest], dict[str, Any]], type, type]] = {
            "GetRepository": (self._get_repository, m.GetRepositoryRequest, m.GetRepositoryResponseBody),
            "ListRepoBuildRule": (
                self._list_repo_build_rule,
                m.ListRepoBuildRuleRequest,
                m.ListRepoBuildRuleResponseBody,
            ),
            "UpdateRepoBuildRule": (
                self._update_repo_build_rule,
                m.UpdateRepoBuildRuleRequest,
                m.UpdateRepoBuildRuleResponseBody,
            ),
            "CreateBuildRecordByRule": (
                self._create_build_record_by_rule,
                m.CreateBuildRecordByRuleRequest,
                m.CreateBuildRecordByRuleResponseBody,
            ),
            "ListRepoBuildRecord": (
                self._list_repo_build_record,
                m.ListRepoBuildRecordRequest,
                m.ListRepoBuildRecordResponseBody,
            ),
            "GetRepoBuildRecord": (
                self._get_repo_build_record,
                m.GetRepoBuildRecordRequest,
                m.GetRepoBuildRecordResponseBody,
            ),
            "GetRepoBuildRecordStatus": (
                self._get_repo_build_record_status,
                m.GetRepoBuildRecordStatusRequest,
                m.GetRepoBuildRecordStatusResponseBody,
            ),
            "ListRepoBuildRecordLog": (
                self._list_repo_build_record_log,
                m.ListRepoBuildRecordLogRequest,
                m.ListRepoBuildRecordLogResponseBody,
            ),
            "CancelRepoBuildRecord": (
                self._cancel_repo_build_record,
                m.CancelRepoBuildRecordRequest,
                m.CancelRepoBuildRecordResponseBody,
            ),
            "GetRepoTag": (self._get_repo_tag, m.GetRepoTagRequest, m.GetRepoTagResponseBody),
        }
        self._request_models = {action: request for action, (_, request, _) in actions.items()}
        for action, (handler, _, response) in actions.items():
            self.add_rpc_action(action, self._checked(handler), response)

    # ----------------------------------------------------------------------------- setup

    def add_repository(self, namespace: str, name: str, repo_id: str | None = None) -> EmulatedRepository:
        with self._lock:
            repo = EmulatedRepository(repo_id or self._new_id("crr"), namespace, name, self.clock())
            self.repositories[repo.repo_id] = repo
            return repo

    def add_build_rule(
        self, repo_id: str, image_tag: str = "latest", rule_id: str | None = None, **settings: Any
    ) -> EmulatedBuildRule:
        """A build rule of ``repo_id`` (settings: dockerfile_location, push_type, push_name, ...)."""
        with self._lock:
            rule = EmulatedBuildRule(rule_id or self._new_id("crbr"), repo_id, image_tag, **settings)
            self.rules[rule.rule_id] = rule
            return rule

    def put_tag(self, repo_id: str, tag: str, digest: str | None = None) -> EmulatedTag:
        """An image tag already in the repository (pushed by someone else)."""
        with self._lock:
            pushed = EmulatedTag(tag, digest or _digest(f"{repo_id}:{tag}"), self.clock())
            self.tags[(repo_id, tag)] = pushed
            return pushed

    def add_finished_build(
        self, repo_id: str, rule_id: str, tag: str, status: str = "SUCCESS", created_at: float | None = None
    ) -> EmulatedBuild:
        """A build record that finished before the test (the repository's history), listed by
        ListRepoBuildRecord; its tag is not put into the repository (:meth:`put_tag` does that)."""
        if status not in FINISHED:
            raise ValueError(f"status must be one of {sorted(FINISHED)}")
        with self._lock:
            at = self.clock() if created_at is None else created_at
            build = EmulatedBuild(
                record_id=self._new_id("crbrd"),
                repo_id=repo_id,
                rule_id=rule_id,
                tag=tag,
                created_at=at,
                script=[],
                ends_at=at,
                final_status=status,
                status=status,
                started_at=at,
                ended_at=at,
            )
            self.builds[build.record_id] = build
            return build

    def fail_next_build(
        self,
        at_step: int = 5,
        output: tuple[str, ...] = ("E: Unable to locate package libnl-3-dev",),
        exit_code: int = 100,
    ) -> None:
        """Make the next build fail at Dockerfile step ``at_step`` (1-based) with ``output``."""
        if not 1 <= at_step <= len(self.steps):
            raise ValueError(f"at_step must be within 1..{len(self.steps)}")
        with self._lock:
            self._failures.append(BuildFailure(at_step, output, exit_code))

    def advance(self) -> None:
        """Move every build along the clock now (requests do this too)."""
        with self._lock:
            for build in self.builds.values():
                self._advance(build)

    def image(self, repo_id: str, tag: str) -> str:
        repo = self.repositories[repo_id]
        return f"{self.registry}/{repo.namespace}/{repo.name}:{tag}"

    def log_of(self, record_id: str) -> list[str]:
        """The lines printed so far."""
        with self._lock:
            return [message for _, _, message in self._printed(self.builds[record_id])]

    # ----------------------------------------------------------------------------- lifecycle

    def _script(
        self, rule: EmulatedBuildRule, start: float, failure: BuildFailure | None
    ) -> tuple[list[tuple[float, str, str]], float, str]:
        """Every line the build prints with its time, when it ends and how."""
        lines = [
            (start, "PREPARE", f"Cloning the source repository ({rule.push_type} {rule.push_name})"),
            (start, "PREPARE", f"Checked out commit {_digest(rule.push_name)[:12]}"),
        ]
        total = len(self.steps)
        for index, instruction in enumerate(self.steps, start=1):
            begin = start + (index - 1) * self.step_seconds
            end = begin + self.step_seconds
            lines.append((begin, "BUILD", f"Step {index}/{total} : {instruction}"))
            if instruction.startswith("RUN"):
                lines.append((begin, "BUILD", f" ---> Running in {_digest(f'run{index}')[:12]}"))
            if failure is not None and failure.at_step == index:
                lines += [(begin + self.step_seconds / 2, "BUILD", text) for text in failure.output]
                command = instruction.removeprefix("RUN ").strip()
                lines.append(
                    (
                        end,
                        "BUILD",
                        f"The command '/bin/sh -c {command}' returned a non-zero code: {failure.exit_code}",
                    )
                )
                return lines, end, "FAILED"
            lines.append((end, "BUILD", f" ---> {_digest(f'layer{index}')[:12]}"))
        built = start + total * self.step_seconds
        image = self.image(rule.repo_id, rule.image_tag)
        digest = _digest(f"{rule.repo_id}:{rule.image_tag}")
        lines += [
            (built, "BUILD", f"Successfully built {_digest('image')[:12]}"),
            (built, "BUILD", f"Successfully tagged {image}"),
            (built, "PUSH", f"The push refers to repository [{image.rsplit(':', 1)[0]}]"),
            (built + self.push_seconds, "PUSH", f"{rule.image_tag}: digest: sha256:{digest} size: 4721"),
        ]
        return lines, built + self.push_seconds, "SUCCESS"

    def _advance(self, build: EmulatedBuild) -> None:
        now = self.clock()
        if build.status == "PENDING" and now >= build.created_at + self.pending_seconds:
            build.status = "BUILDING"
            build.started_at = build.created_at + self.pending_seconds
        if build.status == "BUILDING" and now >= build.ends_at:
            build.status = build.final_status
            build.ended_at = build.ends_at
            if build.status == "SUCCESS":
                pushed = EmulatedTag(build.tag, _digest(f"{build.repo_id}:{build.tag}"), build.ends_at)
                self.tags[(build.repo_id, build.tag)] = pushed
                if self.on_push is not None:
                    self.on_push(self.repositories[build.repo_id], pushed)

    def _advance_all(self) -> None:
        """Builds progress by the clock, so every request first brings them all up to now."""
        for build in self.builds.values():
            self._advance(build)

    def _printed(self, build: EmulatedBuild) -> list[tuple[float, str, str]]:
        if build.status == "PENDING":
            return []
        return [line for line in build.script if line[0] <= self.clock()]

    # ----------------------------------------------------------------------------- handlers

    def _checked(self, handler: Handler) -> Handler:
        """Refuse parameters the SDK could not have sent, advance the builds, map business errors."""

        def answered(request: ApiRequest) -> dict[str, Any]:
            try:
                self._instance(request.query)
                return {**handler(request), "Code": "success", "IsSuccess": True}
            except _BusinessError as error:
                if self.soft_errors:
                    return {"Code": error.code, "IsSuccess": False}
                raise

        return query_checked(answered, self._request_models, _unflatten, self._advance_all)

    def _get_repository(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        if query.get("RepoId"):
            repo = self._repository(query)
        else:
            namespace, name = _required(query, "RepoNamespaceName"), _required(query, "RepoName")
            found = next(
                (r for r in self.repositories.values() if (r.namespace, r.name) == (namespace, name)), None
            )
            if found is None:
                raise _BusinessError(
                    404, "REPO_NOT_EXIST", f"The repository {namespace}/{name} does not exist."
                )
            repo = found
        created = int(repo.created_at * 1000)
        return {
            "CreateTime": created,
            "Detail": "",
            "InstanceId": self.instance_id,
            "ModifiedTime": created,
            "RepoBuildType": "MANUAL",
            "RepoId": repo.repo_id,
            "RepoName": repo.name,
            "RepoNamespaceName": repo.namespace,
            "RepoStatus": "NORMAL",
            "RepoType": "PRIVATE",
            "ResourceGroupId": "rg-emulated",
            "Summary": "",
            "TagImmutability": False,
        }

    def _list_repo_build_rule(self, request: ApiRequest) -> dict[str, Any]:
        repo = self._repository(request.query)
        rules = [r for r in self.rules.values() if r.repo_id == repo.repo_id]
        page, page_no, page_size = _page(rules, request.query)
        return {
            "BuildRules": [_rule_view(r) for r in page],
            "PageNo": page_no,
            "PageSize": page_size,
            "TotalCount": str(len(rules)),
        }

    def _update_repo_build_rule(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        repo = self._repository(query)
        rule = self._rule(query, repo)
        nested = _unflatten(query)
        for wire, attribute in (
            ("ImageTag", "image_tag"),
            ("DockerfileLocation", "dockerfile_location"),
            ("DockerfileName", "dockerfile_name"),
            ("PushName", "push_name"),
            ("PushType", "push_type"),
            ("BuildArgs", "build_args"),
            ("Platforms", "platforms"),
        ):
            if wire in nested:
                setattr(rule, attribute, nested[wire])
        return {"BuildRuleId": rule.rule_id}

    def _create_build_record_by_rule(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        repo = self._repository(query)
        rule = self._rule(query, repo)
        now = self.clock()
        failure = self._failures.pop(0) if self._failures else None
        script, ends_at, final = self._script(rule, now + self.pending_seconds, failure)
        build = EmulatedBuild(
            record_id=self._new_id("crbrd"),
            repo_id=repo.repo_id,
            rule_id=rule.rule_id,
            tag=rule.image_tag,
            created_at=now,
            script=script,
            ends_at=ends_at,
            final_status=final,
        )
        self.builds[build.record_id] = build
        return {"BuildRecordId": build.record_id}

    def _list_repo_build_record(self, request: ApiRequest) -> dict[str, Any]:
        repo = self._repository(request.query)
        # Newest first; builds created at the same instant (a frozen clock) in reverse creation order.
        records = [
            b
            for _, _, b in sorted(
                ((b.created_at, index, b) for index, b in enumerate(self.builds.values())),
                key=lambda entry: entry[:2],
                reverse=True,
            )
            if b.repo_id == repo.repo_id
        ]
        page, page_no, page_size = _page(records, request.query)
        return {
            "BuildRecords": [
                {
                    "BuildRecordId": b.record_id,
                    "BuildStatus": b.status,
                    "EndTime": str(int(b.ended_at * 1000)) if b.ended_at is not None else "",
                    "Image": {
                        "ImageTag": b.tag,
                        "RepoId": repo.repo_id,
                        "RepoName": repo.name,
                        "RepoNamespaceName": repo.namespace,
                    },
                    "StartTime": str(int((b.started_at or b.created_at) * 1000)),
                }
                for b in page
            ],
            "PageNo": page_no,
            "PageSize": page_size,
            "TotalCount": str(len(records)),
        }

    def _get_repo_build_record(self, request: ApiRequest) -> dict[str, Any]:
        build = self._build(request.query)
        repo = self.repositories[build.repo_id]
        body: dict[str, Any] = {
            "BuildRecordId": build.record_id,
            "Image": {"ImageTag": build.tag, "RepoName": repo.name, "RepoNamespaceName": repo.namespace},
            "StartTime": int((build.started_at or build.created_at) * 1000),
            "Status": build.status,
        }
        if build.ended_at is not None:
            body["EndTime"] = int(build.ended_at * 1000)
        return body

    def _get_repo_build_record_status(self, request: ApiRequest) -> dict[str, Any]:
        self._repository(request.query)
        return {"BuildStatus": self._build(request.query).status}

    def _list_repo_build_record_log(self, request: ApiRequest) -> dict[str, Any]:
        query = request.query
        self._repository(query)
        build = self._build(query)
        offset = _int(query, "Offset", 0)
        if offset < 0:
            raise ApiError(400, "InvalidParameter.Offset", "The parameter Offset is invalid.")
        printed = self._printed(build)
        page = printed[offset : offset + self.log_page_size]
        return {
            "BuildRecordLogs": [
                {"BuildStage": stage, "LineNumber": offset + i + 1, "Message": message}
                for i, (_, stage, message) in enumerate(page)
            ],
            "PageNo": offset // self.log_page_size + 1,
            "PageSize": self.log_page_size,
            "TotalCount": str(len(printed)),
        }

    def _cancel_repo_build_record(self, request: ApiRequest) -> dict[str, Any]:
        self._repository(request.query)
        build = self._build(request.query)
        if build.status in FINISHED:
            raise _BusinessError(
                400, "BUILD_RECORD_STATUS_INVALID", f"The build record {build.record_id} is {build.status}."
            )
        now = self.clock()
        build.script = [line for line in build.script if line[0] <= now] + [(now, "BUILD", "Build canceled")]
        build.status = "CANCELED"
        build.started_at = build.started_at or now
        build.ended_at = now
        return {}

    def _get_repo_tag(self, request: ApiRequest) -> dict[str, Any]:
        repo = self._repository(request.query)
        tag = _required(request.query, "Tag")
        pushed = self.tags.get((repo.repo_id, tag))
        if pushed is None:
            raise _BusinessError(404, "TAG_NOT_EXIST", f"The tag {tag} does not exist in {repo.repo_id}.")
        millis = int(pushed.created_at * 1000)
        return {
            "Digest": f"sha256:{pushed.digest}" if self.digest_prefix else pushed.digest,
            "ImageCreate": millis,
            "ImageId": pushed.digest[:64],
            "ImageSize": pushed.size,
            "ImageUpdate": millis,
            "Status": "NORMAL",
            "Tag": pushed.tag,
        }

    # ----------------------------------------------------------------------------- helpers

    def _instance(self, query: Mapping[str, str]) -> None:
        instance_id = _required(query, "InstanceId")
        if instance_id != self.instance_id:
            raise _BusinessError(404, "INSTANCE_NOT_EXIST", f"The instance {instance_id} does not exist.")

    def _repository(self, query: Mapping[str, str]) -> EmulatedRepository:
        repo_id = _required(query, "RepoId")
        repo = self.repositories.get(repo_id)
        if repo is None:
            raise _BusinessError(404, "REPO_NOT_EXIST", f"The repository {repo_id} does not exist.")
        return repo

    def _rule(self, query: Mapping[str, str], repo: EmulatedRepository) -> EmulatedBuildRule:
        rule_id = _required(query, "BuildRuleId")
        rule = self.rules.get(rule_id)
        if rule is None or rule.repo_id != repo.repo_id:
            raise _BusinessError(404, "BUILD_RULE_NOT_EXIST", f"The build rule {rule_id} does not exist.")
        return rule

    def _build(self, query: Mapping[str, str]) -> EmulatedBuild:
        record_id = _required(query, "BuildRecordId")
        build = self.builds.get(record_id)
        if build is None or (query.get("RepoId") and query["RepoId"] != build.repo_id):
            raise _BusinessError(
                404, "BUILD_RECORD_NOT_EXIST", f"The build record {record_id} does not exist."
            )
        return build

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-" + hashlib.sha256(f"{prefix}/{next(self._numbers)}".encode()).hexdigest()[:16]


def _rule_view(rule: EmulatedBuildRule) -> dict[str, Any]:
    return {
        "BuildArgs": list(rule.build_args),
        "BuildRuleId": rule.rule_id,
        "DockerfileLocation": rule.dockerfile_location,
        "DockerfileName": rule.dockerfile_name,
        "ImageTag": rule.image_tag,
        "Platforms": list(rule.platforms),
        "PushName": rule.push_name,
        "PushType": rule.push_type,
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _unflatten(query: Mapping[str, str]) -> dict[str, Any]:
    """``Platforms.1=a&Platforms.2=b`` -> ``{"Platforms": ["a", "b"]}``: the shape the SDK maps from."""
    nested: dict[str, Any] = {}
    lists: dict[str, dict[int, str]] = {}
    for key, value in query.items():
        name, _, index = key.partition(".")
        if index.isdigit():
            lists.setdefault(name, {})[int(index)] = value
        else:
            nested[key] = value
    for name, items in lists.items():
        nested[name] = [items[i] for i in sorted(items)]
    return nested


def _required(query: Mapping[str, str], name: str) -> str:
    value = query.get(name)
    if not value:
        raise ApiError(
            400,
            "MissingParameter",
            f"The input parameter {name} that is mandatory for processing this request is not supplied.",
        )
    return value


def _int(query: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(query.get(name) or default)
    except ValueError as exc:
        raise ApiError(400, f"InvalidParameter.{name}", f"The parameter {name} is invalid.") from exc


def _page(items: list[Any], query: Mapping[str, str]) -> tuple[list[Any], int, int]:
    page_no = _int(query, "PageNo", 1)
    page_size = _int(query, "PageSize", DEFAULT_PAGE_SIZE)
    if page_no < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ApiError(400, "InvalidParameter", "PageNo must be >= 1 and PageSize within 1..100.")
    start = (page_no - 1) * page_size
    return items[start : start + page_size], page_no, page_size
