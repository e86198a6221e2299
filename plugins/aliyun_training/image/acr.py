"""The ``acr`` image builder: ACR Enterprise Edition's build service builds and pushes the image.

ACR builds from the source code repository bound to the image repository (GitHub, GitLab,
Codeup, ...), **not** from files on the Airflow worker. The content-addressed ``tag`` is computed
elsewhere from our Dockerfile and build context; this builder only makes ACR build that tag:

1. ``GetRepository`` resolves the repository (by ``repo_id``, or by ``namespace`` + ``repo_name``)
   and checks that ``image`` names it;
2. ``ListRepoBuildRecord``: a record of this repository whose image tag is ``tag`` and that did not
   fail or get canceled is reattached to, so a retried ``submit`` never starts a second build
   (a SUCCESS record is reattached to only while ``GetRepoTag`` still finds the tag: a tag deleted
   since is built again rather than reported forever as missing). Runs that look at the same moment
   (a backfill's) both find none and both start one: after starting, each lists again, and every
   one but the earliest running record of the tag (StartTime, then id) cancels its own and
   reattaches to that one, so one build of a tag runs;
3. ``ListRepoBuildRule`` + ``UpdateRepoBuildRule``: the build rule's ImageTag is set to ``tag``,
   only when it differs (the rule's other settings are sent back unchanged);
4. ``CreateBuildRecordByRule`` starts the build; ``GetRepoBuildRecord`` and
   ``ListRepoBuildRecordLog`` watch it; ``GetRepoTag`` gives the pushed image's digest;
   ``CancelRepoBuildRecord`` stops it.

Every call goes through ``hooks.cr.CrHook``. :func:`rule_update_request` and
:func:`build_record_request` build the requests of steps 3 and 4 with no call and no connection,
so a dry run can show them.

Requirements the service cannot check for us, so they are the operator's:

- The bound source repository, at the branch or tag of the build rule (PushType/PushName), must
  hold the same Dockerfile and build context that ``tag`` was computed from. Otherwise the image
  pushed under the content-addressed tag is not the content it claims to be.
- Use a build rule dedicated to this pipeline: its ImageTag is rewritten on every new tag, which
  would also rename the images of push-triggered builds of a shared rule. Two runs building
  different tags through one rule at the same moment can race between steps 3 and 4; the build
  record's own image tag is therefore checked on every poll, and a build of another tag fails
  the run with an explanation instead of being passed off as ours.

Facts from the SDK (alibabacloud_cr20181201 2.2.5), all RPC ``POST /`` except ``GetRepoTag``
(``GET /``), parameters in the query: CreateBuildRecordByRule(InstanceId, RepoId, BuildRuleId) ->
BuildRecordId; GetRepoBuildRecord(InstanceId, BuildRecordId) -> Status, Image.ImageTag,
StartTime/EndTime (ms); ListRepoBuildRecord(InstanceId, RepoId, PageNo, PageSize) ->
BuildRecords[].BuildRecordId/BuildStatus/Image.ImageTag; ListRepoBuildRecordLog(InstanceId, RepoId,
BuildRecordId, Offset) -> BuildRecordLogs[].LineNumber/Message/BuildStage; ListRepoBuildRule ->
BuildRules[] (BuildRuleId, ImageTag, DockerfileLocation, DockerfileName, BuildArgs, Platforms,
PushName, PushType); UpdateRepoBuildRule takes the same fields; GetRepoTag(InstanceId, RepoId,
Tag) -> Digest, Status (NORMAL/DELETING); CancelRepoBuildRecord(InstanceId, RepoId,
BuildRecordId). Every answer carries ``Code`` and ``IsSuccess``; a body with ``IsSuccess: false``
is treated as a failed call. The two lists answer PageNo, PageSize and TotalCount (a string).

Assumptions where the SDK documents nothing:

- Build statuses: the SDK does not enumerate them for build records. ``PENDING``, ``BUILDING``,
  ``SUCCESS``, ``FAILED`` are the values it documents for ACR's artifact build tasks;
  ``CANCELED`` (or ``CANCELLED``) is assumed for a canceled build. Statuses are compared
  case-insensitively; an unknown status keeps the run ``running`` (shown in the progress line)
  unless it contains FAIL, CANCEL or ERROR.
- ListRepoBuildRecordLog's ``Offset`` is taken as the number of lines already read; lines are
  de-duplicated by LineNumber and reading stops at a page that brings no new line, so a service
  that counts differently still yields each line once.
- GetRepoTag's Digest may come with or without ``sha256:``; the result always has the prefix.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aliyun_training.connections import ALIBABA_CLOUD_DEFAULT_CONN_ID
from aliyun_training.hooks.cr import not_found
from aliyun_training.hooks.retry import AlibabaCloudApiError
from aliyun_training.remote import RemoteStatus
from aliyun_training.validation import SpecError, field_fix, validate_record

if TYPE_CHECKING:
    from aliyun_training.hooks.cr import CrHook

log = logging.getLogger(__name__)

SUCCEEDED_STATUS = "SUCCESS"
FAILED_STATUSES = frozenset({"FAILED", "CANCELED", "CANCELLED"})
#: How many log lines a failure message and ``result``'s ``log_tail`` carry.
LOG_TAIL_LINES = 20
#: ListRepoBuildRecord pages looked through for a build of the same tag (newest records first).
MAX_RECORD_PAGES = 10
#: ListRepoBuildRecordLog pages read per call, a guard against a service that never ends a log.
MAX_LOG_PAGES = 1000
DOCKER_TAG_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"

#: A Dockerfile step: classic ``Step 5/9 : RUN ...``, BuildKit ``#8 [stage 4/6] RUN ...`` and the
#: BuildKit failure summary `` > [stage 4/6] RUN ...:``.
_STEP = re.compile(r"(Step \d+/\d+ : .*|(?:#\d+|>) \[[^\]]*\d+/\d+\] .*)")
#: Lines that end a failed build for sure, then lines that merely look like errors.
_FATAL = re.compile(r"returned a non-zero code|did not complete successfully|failed to solve", re.I)
_ERROR = re.compile(r"^\s*ERROR\b|\berror\b:", re.I)


class AcrBuildError(RuntimeError):
    """A finished ACR build cannot be used (it failed, built another tag, or its image is gone)."""


class AcrBuildSettings(BaseModel):
    """Which ACR Enterprise instance, repository and build rule build ``tag`` into ``image``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Build again even when a build of ``tag`` succeeded (the form's "force rebuild").
    force: bool = False

    alibaba_cloud_conn_id: Annotated[
        str, Field(min_length=1, json_schema_extra=field_fix("name an alibaba_cloud Airflow connection"))
    ] = ALIBABA_CLOUD_DEFAULT_CONN_ID
    instance_id: Annotated[
        str,
        Field(
            pattern=r"^cri-[A-Za-z0-9]+$",
            json_schema_extra=field_fix(
                "give the ACR Enterprise instance id, cri-... (ACR console, Overview)"
            ),
        ),
    ]
    repo_id: Annotated[
        str | None,
        Field(
            pattern=r"^crr-[A-Za-z0-9]+$",
            json_schema_extra=field_fix(
                "give the repository id, crr-..., or namespace and repo_name instead"
            ),
        ),
    ] = None
    namespace: Annotated[
        str | None,
        Field(
            min_length=1, json_schema_extra=field_fix("give the repository's namespace, or repo_id instead")
        ),
    ] = None
    repo_name: Annotated[
        str | None,
        Field(min_length=1, json_schema_extra=field_fix("give the repository's name, or repo_id instead")),
    ] = None
    build_rule_id: Annotated[
        str,
        Field(
            min_length=1,
            json_schema_extra=field_fix(
                "give the id of a build rule of the repository used only by this pipeline"
            ),
        ),
    ]
    tag: Annotated[
        str,
        Field(
            pattern=DOCKER_TAG_PATTERN,
            json_schema_extra=field_fix("use the content-addressed tag: letters, digits, _ . -, at most 128"),
        ),
    ]
    image: Annotated[
        str,
        Field(
            pattern=r"^[A-Za-z0-9.-]+(:\d+)?/[a-z0-9._/-]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$",
            json_schema_extra=field_fix("give the full reference <registry>/<namespace>/<repo>:<tag>"),
        ),
    ]

    @model_validator(mode="after")
    def _consistent(self) -> AcrBuildSettings:
        if not self.repo_id and not (self.namespace and self.repo_name):
            raise ValueError(
                "repo_id, or namespace and repo_name, must be set (fix: give repo_id crr-..., or both "
                "namespace and repo_name)"
            )
        if not self.image.endswith(f":{self.tag}"):
            raise ValueError(
                f"image {self.image!r} does not end with the tag {self.tag!r} "
                "(fix: build image as <registry>/<namespace>/<repo>:<tag> from the same tag)"
            )
        if (
            self.namespace
            and self.repo_name
            and not _image_path(self.image).endswith(f"/{self.namespace}/{self.repo_name}")
        ):
            raise ValueError(
                f"image {self.image!r} is not in repository {self.namespace}/{self.repo_name} "
                "(fix: make image and namespace/repo_name name the same repository)"
            )
        return self


def rule_update_request(settings: AcrBuildSettings, repo_id: str, rule: Any) -> Any:
    """The UpdateRepoBuildRule request that points ``rule`` (a ListRepoBuildRule entry) at the tag.

    The rule's other settings are sent back unchanged: an update is not documented to keep fields
    it is not given. Pure: no call, no connection, no secret.
    """
    from alibabacloud_cr20181201 import models

    return models.UpdateRepoBuildRuleRequest(
        instance_id=settings.instance_id,
        repo_id=repo_id,
        build_rule_id=settings.build_rule_id,
        image_tag=settings.tag,
        build_args=rule.build_args or None,
        dockerfile_location=rule.dockerfile_location,
        dockerfile_name=rule.dockerfile_name,
        platforms=rule.platforms or None,
        push_name=rule.push_name,
        push_type=rule.push_type,
    )


def build_record_request(settings: AcrBuildSettings, repo_id: str) -> Any:
    """The CreateBuildRecordByRule request that starts a build of the settings' build rule.

    ``repo_id`` is the repository's id (``settings.repo_id``, or what GetRepository answered for
    namespace/repo_name). Pure: no call, no connection, no secret.
    """
    from alibabacloud_cr20181201 import models

    return models.CreateBuildRecordByRuleRequest(
        instance_id=settings.instance_id, repo_id=repo_id, build_rule_id=settings.build_rule_id
    )


class AcrBuilder:
    """RemoteRun over one ACR Enterprise build record."""

    mode: ClassVar[str] = "acr"

    def __init__(self, **config: Any) -> None:
        self.settings = validate_record(AcrBuildSettings, config)
        #: build record id -> log lines read so far (the triggerer polls one builder repeatedly).
        self._logs: dict[str, dict[int, str]] = {}

    def _hook(self) -> CrHook:
        from aliyun_training.hooks.alibaba_cloud import shared_hook
        from aliyun_training.hooks.cr import CrHook

        return shared_hook(CrHook, self.settings.alibaba_cloud_conn_id)

    # -- submit ----------------------------------------------------------------------------------

    def submit(self) -> dict[str, Any]:
        """Reattach to a live or finished build of ``tag``, or point the rule at it and build."""
        settings = self.settings
        hook = self._hook()
        repo_id = self._repository(hook)
        handle = {
            "instance_id": settings.instance_id,
            "repo_id": repo_id,
            "build_rule_id": settings.build_rule_id,
            "tag": settings.tag,
            "image": settings.image,
        }
        existing = self._existing_record(hook, repo_id)
        if existing is not None:
            record_id, status = existing
            rebuild = status == SUCCEEDED_STATUS and settings.force
            if not rebuild and (status != SUCCEEDED_STATUS or self._tag_digest(hook, repo_id) is not None):
                log.info("ACR build %s of tag %s is %s: reattaching to it", record_id, settings.tag, status)
                return {**handle, "build_record_id": record_id, "reattached": True}
            log.info(
                "ACR build %s of tag %s succeeded, but the tag is gone or a rebuild is forced: building",
                record_id,
                settings.tag,
            )

        rule = self._build_rule(hook, repo_id)
        if rule.image_tag != settings.tag:
            log.info(
                "ACR build rule %s: ImageTag %s -> %s", settings.build_rule_id, rule.image_tag, settings.tag
            )
            hook.update_build_rule(rule_update_request(settings, repo_id, rule))
        body = hook.create_build_record(build_record_request(settings, repo_id))
        if not body.build_record_id:
            raise AcrBuildError(
                f"CreateBuildRecordByRule answered no BuildRecordId (RequestId: {body.request_id})"
            )
        log.info("ACR build %s started for %s", body.build_record_id, settings.image)
        started = {**handle, "build_record_id": body.build_record_id, "reattached": False}
        first = self._first_running_record(hook, repo_id)
        if first is None or first == body.build_record_id:
            return started
        # Another run started a build of the same tag between our look and our start (concurrent
        # backfill runs do): every racer keeps the earliest, so one build runs and the others wait.
        log.info(
            "ACR build %s of tag %s started first: canceling ours (%s), reattaching",
            first,
            settings.tag,
            body.build_record_id,
        )
        self.stop(started)
        return {**handle, "build_record_id": first, "reattached": True}

    def _repository(self, hook: CrHook) -> str:
        """The repository's id, after checking that ``image`` is in it (a SpecError otherwise)."""
        settings = self.settings
        wanted = settings.repo_id or f"{settings.namespace}/{settings.repo_name}"
        try:
            body = hook.get_repository(
                settings.instance_id,
                repo_id=settings.repo_id,
                namespace=settings.namespace,
                repo_name=settings.repo_name,
            )
        except AlibabaCloudApiError as exc:
            if not_found(exc.code):
                field = "repo_id" if settings.repo_id else "namespace"
                raise SpecError(
                    f"{field}: repository {wanted} does not exist in ACR instance {settings.instance_id} "
                    f"({exc.code}) (fix: create it, or correct instance_id/{field})"
                ) from exc
            raise
        if not body.repo_id:
            raise SpecError(
                f"repo_id: ACR instance {settings.instance_id} answered no repository for {wanted} "
                "(fix: check instance_id and the repository)"
            )
        path = f"/{body.repo_namespace_name}/{body.repo_name}"
        if body.repo_namespace_name and body.repo_name and not _image_path(settings.image).endswith(path):
            raise SpecError(
                f"image: {settings.image} is not in repository {path.lstrip('/')} ({body.repo_id}) "
                "(fix: make image and the repository settings name the same repository)"
            )
        return body.repo_id

    def _existing_record(self, hook: CrHook, repo_id: str) -> tuple[str, str] | None:
        """The newest build record of ``tag`` that is running or succeeded, as (id, status)."""
        for record in hook.build_records(self.settings.instance_id, repo_id, max_pages=MAX_RECORD_PAGES):
            tag = record.image.image_tag if record.image else None
            status = (record.build_status or "").upper()
            if tag == self.settings.tag and _state(status) != "failed":
                return record.build_record_id, status
        return None

    def _first_running_record(self, hook: CrHook, repo_id: str) -> str | None:
        """The earliest-created build record of ``tag`` still running, or None: the last one in
        ListRepoBuildRecord's newest-first order. (StartTime cannot order them: a pending build's
        changes when it starts, so two racers looking at different moments would disagree.)"""
        running = [
            record.build_record_id
            for record in hook.build_records(self.settings.instance_id, repo_id, max_pages=MAX_RECORD_PAGES)
            if record.image
            and record.image.image_tag == self.settings.tag
            and _state((record.build_status or "").upper()) == "running"
        ]
        return running[-1] if running else None

    def _build_rule(self, hook: CrHook, repo_id: str) -> Any:
        settings = self.settings
        rules = hook.build_rules(settings.instance_id, repo_id)
        rule = next((r for r in rules if r.build_rule_id == settings.build_rule_id), None)
        if rule is None:
            raise SpecError(
                f"build_rule_id: repository {repo_id} has no build rule {settings.build_rule_id} "
                "(fix: create a build rule for the bound source repository in the ACR console, "
                "Repository > Build, and give its id)"
            )
        return rule

    # -- poll ------------------------------------------------------------------------------------

    async def apoll(self, handle: dict[str, Any]) -> RemoteStatus:
        hook = self._hook()
        body = await hook.aget_build_record(handle["instance_id"], handle["build_record_id"])
        lines = await self._aread_log(hook, handle)
        return self._status(handle, body, lines)

    def _status(self, handle: dict[str, Any], body: Any, lines: list[str]) -> RemoteStatus:
        record_id = handle["build_record_id"]
        status = (body.status or "").upper()
        built_tag = body.image.image_tag if body.image else None
        state = _state(status)
        progress = f"ACR build {record_id} {status or 'UNKNOWN'}: {progress_line(lines)}"
        if built_tag and built_tag != handle["tag"]:
            return RemoteStatus(
                "failed",
                message=(
                    f"ACR build {record_id} builds tag {built_tag}, not {handle['tag']}: build rule "
                    f"{handle['build_rule_id']} was changed by someone else between update and build "
                    "(fix: give this pipeline a build rule of its own, then retry)"
                ),
            )
        if state == "failed":
            return RemoteStatus(
                "failed", message=failure_message(record_id, status, lines), progress=progress
            )
        return RemoteStatus(state, progress=progress)

    # -- result and stop -------------------------------------------------------------------------

    def result(self, handle: dict[str, Any]) -> dict[str, Any]:
        """``{"image", "digest", "log_tail"}`` of a succeeded build; AcrBuildError otherwise."""
        hook = self._hook()
        record = hook.get_build_record(handle["instance_id"], handle["build_record_id"])
        lines = self._read_log(hook, handle)
        status = self._status(handle, record, lines)
        if status.state != "succeeded":
            raise AcrBuildError(status.message or f"ACR build {handle['build_record_id']} has not finished")
        digest = self._tag_digest(hook, handle["repo_id"])
        if digest is None:
            raise AcrBuildError(
                f"ACR build {handle['build_record_id']} succeeded but tag {handle['tag']} is not in "
                f"repository {handle['repo_id']}: it was deleted, or never pushed "
                "(fix: check the build rule's ImageTag and retry; a retry builds it again)"
            )
        return {"image": handle["image"], "digest": digest, "log_tail": lines[-LOG_TAIL_LINES:]}

    def _tag_digest(self, hook: CrHook, repo_id: str) -> str | None:
        """``sha256:...`` of ``tag`` in the repository (GetRepoTag), None when there is no such tag."""
        tag = hook.get_repo_tag(self.settings.instance_id, repo_id, self.settings.tag)
        if tag is None:
            return None
        if not tag.digest:
            raise AcrBuildError(f"GetRepoTag answered no Digest for {self.settings.image}")
        return normalize_digest(tag.digest)

    def stop(self, handle: dict[str, Any]) -> None:
        """CancelRepoBuildRecord; a build already finished (or gone) is left alone."""
        hook = self._hook()
        if not self._running(hook, handle, gone_ok=True):
            return
        try:
            hook.cancel_build_record(handle["instance_id"], handle["repo_id"], handle["build_record_id"])
        except AlibabaCloudApiError:
            # It may have finished between the two calls: only a build still running is an error.
            if self._running(hook, handle, gone_ok=False):
                raise
        log.info("ACR build %s canceled", handle["build_record_id"])

    def _running(self, hook: CrHook, handle: dict[str, Any], gone_ok: bool) -> bool:
        """Whether the build record is still running; a record that is gone is not, if ``gone_ok``."""
        try:
            record = hook.get_build_record(handle["instance_id"], handle["build_record_id"])
        except AlibabaCloudApiError as exc:
            if gone_ok and not_found(exc.code):
                return False
            raise
        return _state((record.status or "").upper()) == "running"

    # -- logs ------------------------------------------------------------------------------------

    def _read_log(self, hook: CrHook, handle: dict[str, Any]) -> list[str]:
        """Every log line of the build, reading only what was not read before."""
        seen = self._logs.setdefault(handle["build_record_id"], {})
        for _ in range(MAX_LOG_PAGES):
            entries = hook.build_log(
                handle["instance_id"], handle["repo_id"], handle["build_record_id"], len(seen)
            )
            if not _merge(seen, entries):
                break
        return _lines(seen)

    async def _aread_log(self, hook: CrHook, handle: dict[str, Any]) -> list[str]:
        seen = self._logs.setdefault(handle["build_record_id"], {})
        for _ in range(MAX_LOG_PAGES):
            entries = await hook.abuild_log(
                handle["instance_id"], handle["repo_id"], handle["build_record_id"], len(seen)
            )
            if not _merge(seen, entries):
                break
        return _lines(seen)


def failure_message(record_id: str, status: str, lines: list[str]) -> str:
    """Names the failing step (the last ``Step N/M : ...`` or BuildKit ``[N/M]`` line before the
    first error) and the error line, then the last :data:`LOG_TAIL_LINES` log lines."""
    error_at = next(
        (i for pattern in (_FATAL, _ERROR) for i, line in enumerate(lines) if pattern.search(line)),
        len(lines),
    )
    steps = [
        match.group(1).strip().rstrip(":") for line in lines[: error_at + 1] if (match := _STEP.search(line))
    ]
    where = f"at {steps[-1]}" if steps else "before any build step"
    error = f": {lines[error_at].strip()}" if error_at < len(lines) else ""
    tail = "\n".join(f"  {line}" for line in lines[-LOG_TAIL_LINES:]) or "  (the build log is empty)"
    verb = "was canceled" if "CANCEL" in status else "failed"
    return f"ACR build {record_id} {verb} ({status}) {where}{error}\nlast {LOG_TAIL_LINES} log lines:\n{tail}"


def progress_line(lines: list[str]) -> str:
    """The current build step and, when it is not that step, the last log line."""
    if not lines:
        return "(no build log yet)"
    last = lines[-1].strip()
    step = next((m.group(1).strip() for line in reversed(lines) if (m := _STEP.search(line))), None)
    return f"{step} | {last}" if step and step != last else last


def normalize_digest(digest: str) -> str:
    """ACR answers the manifest digest with or without the ``sha256:`` prefix; always add it."""
    digest = digest.strip()
    return digest if ":" in digest else f"sha256:{digest}"


def _state(status: str) -> Literal["running", "succeeded", "failed"]:
    if status == SUCCEEDED_STATUS:
        return "succeeded"
    if status in FAILED_STATUSES or "FAIL" in status or "CANCEL" in status or "ERROR" in status:
        return "failed"
    return "running"


def _merge(seen: dict[int, str], entries: list[Any]) -> bool:
    """Add a page of log entries; False when it brought no new line (the end of the log)."""
    added = False
    for entry in entries:
        number = entry.line_number if entry.line_number is not None else len(seen) + 1
        if number not in seen:
            seen[number] = (entry.message or "").rstrip("\n")
            added = True
    return added


def _lines(seen: dict[int, str]) -> list[str]:
    return [line for number in sorted(seen) for line in seen[number].splitlines() or [""]]


def _image_path(image: str) -> str:
    """``registry/namespace/repo`` of ``registry/namespace/repo:tag``."""
    return image.rsplit(":", 1)[0]
