"""A person approves a promotion before the pointer moves (Airflow's human-in-the-loop approval).

Imported only by pipelines whose promotion rule asks for approval: the HITL operators live in the
standard provider, which a pipeline without approval never needs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk.exceptions import AirflowSkipException

from aliyun_training.notifications import NotifyEvent
from aliyun_training.operators.notices import notify_once
from aliyun_training.pages.urls import report_page
from aliyun_training.promotion import Approval, Decision
from aliyun_training.stage_records import ApprovalAnswer, ArtifactSet
from aliyun_training.upstream import ReturnedRecordsMixin
from aliyun_training.validation import validate_record

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import Context

    from aliyun_training.notifications import NotifierSpec

#: task_state_store key marking the approval as announced (a retry of the task does not repeat it).
APPROVAL_NOTICE_KEY = "approval_announced"


class PromotionApprovalOperator(ReturnedRecordsMixin, ApprovalOperator):
    """Ask for approval of a candidate the gate passed, showing the comparison; skip otherwise.

    The task waits in Airflow's ``awaiting_input`` state, holding no worker slot. Approve lets the
    ``promote`` task move the pointer; Reject, or no answer within ``approval.timeout_hours`` (the
    default answer is Reject), does not: ``promote`` records that outcome in the published report
    and manifest and then skips, and the run still succeeds, with its candidate registered.
    It returns the answer (``ApprovalAnswer``: the option, who chose it and whether the timeout
    chose it, as Airflow recorded them), which ``promote`` checks against the rule's approvers:
    marking this task successful without an answer leaves no sealed answer, and ``promote`` moves
    nothing.

    :param published: the publish task's ArtifactSet record (an XComArg).
    :param approval: the promotion rule's ``Approval``.
    :param notifications: the pipeline's notifiers, told once that an approval is waiting.
    """

    template_fields = (*ApprovalOperator.template_fields, "published")

    def __init__(
        self,
        *,
        published: Any,
        approval: Approval,
        model: str,
        notifications: Sequence[NotifierSpec] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            subject=f"Promote the new {model} model to champion?",
            defaults=ApprovalOperator.REJECT,
            response_timeout=timedelta(hours=approval.timeout_hours),
            assigned_users=[{"id": user, "name": user} for user in approval.approvers] or None,
            **kwargs,
        )
        self.published = published
        self.approvers = list(approval.approvers)
        self.notifications = list(notifications)

    def execute(self, context: Context) -> Any:
        record = validate_record(ArtifactSet, self.published) if self.published else None
        if record is None or record.promotion is None:
            raise AirflowSkipException("nothing was published: there is nothing to approve")
        decision = Decision.model_validate(record.promotion)
        if not decision.needs_approval:
            raise AirflowSkipException(decision.reason)
        run = context["dag_run"]
        self.body = approval_body(decision, record, report_page(run.dag_id, run.run_id))
        who = ", ".join(self.approvers) or "anyone who may approve it"
        notify_once(
            context,
            APPROVAL_NOTICE_KEY,
            NotifyEvent.APPROVAL_WAITING,
            f"{self.subject} {decision.reason}. Waiting for {who} (the Reject default after "
            f"{self.response_timeout}); see {report_page(run.dag_id, run.run_id)}",
            self.notifications,
        )
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The answer, once Airflow resumed the task with it.

        HITLOperator's reading of it, not ApprovalOperator's: that one skips ``promote`` on Reject,
        and ``promote`` must run to record the outcome in the published report and manifest (it
        skips itself then).
        """
        response = HITLOperator.execute_complete(self, context, event)
        responder = response.get("responded_by_user") or {}
        answer = ApprovalAnswer(
            option=response["chosen_options"][0],
            responded_by={key: str(value) for key, value in dict(responder).items() if value is not None},
            timed_out=bool(event.get("timedout")),
        )
        refusal = answer.refusal(self.approvers)
        if refusal:
            self.log.warning("Not approved: %s", refusal)
        else:
            self.log.info("Approved by %s", answer.responded_by.get("name") or answer.responded_by.get("id"))
        return answer.model_dump(mode="json")


def approval_body(decision: Decision, record: ArtifactSet, report_url: str) -> str:
    """The comparison in Markdown, as the approver reads it in the UI: the decisive metric beside
    the champion's, each guard beside its bounds, and a link to the run report (``report_url``, the
    pages' address of the run's report, which reads it from wherever it was published)."""
    registered = (record.registered or {}).get("uri")
    return "\n".join(
        [
            f"**Gate passed** ({decision.basis}): {decision.reason}.",
            "",
            f"| metric | candidate | champion ({decision.champion_run_id or 'none'}) |",
            "|---|---|---|",
            f"| {decision.metric} | {_value(decision.candidate)} | {_value(decision.champion)} |",
            "",
            *(
                ["Guards:", *(f"- {guard.text()}" for guard in decision.guards), ""]
                if decision.guards
                else []
            ),
            f"Dataset version: {record.dataset_version}; registered as {registered or '-'}",
            "",
            f"[Open the run report]({report_url}) (published at `{record.report_uri}`)",
        ]
    )


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"
