"""Does the RAM role that runs DLC jobs hold every action of the DLC default role policy? (RAM hook)

The Lingjun guide lists the actions a role needs (``aliyun_training/preflight/dlc_role_policy.json``); a role
missing some fails jobs late (no network interface, no dataset mount). The check reads the role's
attached policies and reports every required action none of them allows.
"""

from __future__ import annotations

import fnmatch
import json
from typing import TYPE_CHECKING, Any

from aliyun_training.findings import Finding, Verdict

if TYPE_CHECKING:
    from pathlib import Path

    from aliyun_training.hooks.ram import RamHook


def required_actions(policy_file: Path) -> list[str]:
    """The actions of the reference policy, in its order."""
    document = json.loads(policy_file.read_text())["policy"]
    return [action for statement in document["Statement"] for action in _actions(statement)]


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement.get("Action", [])
    return [actions] if isinstance(actions, str) else list(actions)


def role_name(role_arn: str) -> str:
    """``acs:ram::<uid>:role/<name>`` -> ``<name>``."""
    return role_arn.rsplit("role/", 1)[-1]


def allowed_patterns(hook: RamHook, role: str) -> tuple[list[str], list[str]]:
    """(Allow, Deny) action patterns of every policy attached to ``role``."""
    allow: list[str] = []
    deny: list[str] = []
    for policy in hook.role_policies(role):
        document = hook.policy_document(policy.policy_name, policy.policy_type)
        for statement in document.get("Statement", []):
            (allow if statement.get("Effect") == "Allow" else deny).extend(_actions(statement))
    return allow, deny


def check_role_permissions(hook: RamHook, role: str, required: list[str]) -> Finding:
    if hook.get_role(role) is None:
        return Finding(
            check="ram_role",
            verdict=Verdict.FAIL,
            found=f"RAM role {role} does not exist",
            fix="create it in the RAM console (trusted service: PAI) or fix role_arn",
        )
    allow, deny = allowed_patterns(hook, role)
    missing = [action for action in required if not _covered(action, allow, deny)]
    if missing:
        return Finding(
            check="ram_role",
            verdict=Verdict.FAIL,
            found=f"RAM role {role} lacks {len(missing)} of {len(required)} actions: {', '.join(missing)}",
            fix="attach a policy with these actions (see aliyun_training/preflight/dlc_role_policy.json, "
            "the Lingjun guide's AliyunPAIDLCDefaultRolePolicy)",
        )
    return Finding(
        check="ram_role", verdict=Verdict.PASS, found=f"RAM role {role} allows all {len(required)} actions"
    )


def _covered(action: str, allow: list[str], deny: list[str]) -> bool:
    """RAM action patterns are case-insensitive with ``*`` wildcards; an explicit Deny wins."""

    def matches(patterns: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in patterns)

    return matches(allow) and not matches(deny)
