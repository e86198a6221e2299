"""RAM 2015-05-01 emulator (roles and the policies attached to them), and RAM denials for every emulator.

Two things live here because both are about RAM:

- :class:`RamAuthorizedEmulator`, the base of the cloud emulators whose actions a test can deny to
  a caller (``emulator.deny("GetQuota")``), answering HTTP 403 with the code the product uses.
  The denial is decided after authentication and fault injection, like the gateway's RAM check,
  and changes no state.
- :class:`RamEmulator`: GetRole, ListPoliciesForRole and GetPolicy over RPC, enough to read which
  actions a role's attached policies allow.

Codes (HTTP status, Code), from the RAM and STS API references:

- unknown role (GetRole, ListPoliciesForRole): 404 ``EntityNotExist.Role``;
- unknown policy, or a policy asked for with the other PolicyType: 404 ``EntityNotExist.Policy``;
- PolicyType other than System/Custom: 400 ``InvalidParameter.PolicyType``;
- a denied RAM action: 403 ``NoPermission`` (what RAM and STS document for a caller RAM does not
  authorize).

ListPoliciesForRole is not paged: its request model has RoleName only and its answer no Marker or
IsTruncated (alibabacloud_ram20150501 1.3.0), so every attached policy is answered at once.

Decisions where the service's behaviour is not documented: role names match exactly (no case
folding) while the ARN carries the lower-cased name, as real ARNs do; every policy has one
version, ``v1``, which is the default.
"""

from __future__ import annotations

import copy
import json
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from alibabacloud_ram20150501 import models as ram_models

from fakes.base import ApiError, ApiRequest, EmulatorServer, Handler, iso_utc

if TYPE_CHECKING:
    from collections.abc import Mapping

    from darabonba.model import DaraModel

POLICY_TYPES = frozenset({"System", "Custom"})
DEFAULT_ACCOUNT_ID = "1234567890123456"
#: Whom a role trusts by default: the PAI service, as the DLC default role does.
PAI_TRUST_POLICY = {
    "Statement": [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": ["pai.aliyuncs.com"]}}
    ],
    "Version": "1",
}


class RamAuthorizedEmulator(EmulatorServer):
    """An emulator whose actions a test can deny, per caller or to everyone.

    ``denial_code``/``denial_message`` are the product's answer to a caller RAM does not
    authorize; a subclass serving several products overrides :meth:`denial_for`.
    """

    denial_code: ClassVar[str] = "Forbidden.RAM"
    denial_message: ClassVar[str] = (
        "User not authorized to operate on the specified resource, or this API doesn't support RAM."
    )

    def __init__(self, access_keys: Mapping[str, str | None] | None = None) -> None:
        super().__init__(access_keys)
        #: action -> {AccessKeyId (None: every caller) -> error code}
        self._denied: dict[str, dict[str | None, str]] = {}

    def deny(self, action: str, access_key_id: str | None = None, code: str | None = None) -> None:
        """Answer ``action`` with HTTP 403 for ``access_key_id`` (every caller when None).

        ``code`` overrides the product's usual code, e.g. to try another spelling of the denial.
        """
        with self._lock:
            self._denied.setdefault(action, {})[access_key_id] = code or self.denial_for(action)[0]

    def allow(self, action: str) -> None:
        """Lift every denial of ``action``."""
        with self._lock:
            self._denied.pop(action, None)

    def denial_for(self, action: str) -> tuple[str, str]:
        """(Code, Message) this product answers when RAM denies ``action``."""
        return self.denial_code, self.denial_message

    def add_roa_route(
        self,
        method: str,
        path_template: str,
        action: str,
        handler: Handler,
        response_model: type[DaraModel] | None = None,
        request_id_key: str = "RequestId",
    ) -> None:
        """Register like the base class, with the RAM check in front of the handler."""
        super().add_roa_route(
            method, path_template, action, self._guarded(handler), response_model, request_id_key
        )

    def add_rpc_action(
        self, action: str, handler: Handler, response_model: type[DaraModel] | None = None
    ) -> None:
        """Register like the base class, with the RAM check in front of the handler."""
        super().add_rpc_action(action, self._guarded(handler), response_model)

    def _guarded(self, handler: Handler) -> Handler:
        def guarded(request: ApiRequest) -> dict[str, Any]:
            self._check_allowed(request)
            return handler(request)

        return guarded

    def _check_allowed(self, request: ApiRequest) -> None:
        denied = self._denied.get(request.action, {})
        code = denied.get(request.access_key_id) or denied.get(None)
        if code:
            raise ApiError(403, code, self.denial_for(request.action)[1])


@dataclass
class EmulatedPolicy:
    """A policy: its document (a dict; the API returns it as a JSON string) and when it was made."""

    name: str
    policy_type: str
    document: dict[str, Any]
    created_at: float
    description: str = ""


@dataclass
class EmulatedRole:
    """A role and the policies attached to it, as (PolicyType, PolicyName, attach time)."""

    name: str
    role_id: str
    created_at: float
    description: str = ""
    trust_policy: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(PAI_TRUST_POLICY))
    attached: list[tuple[str, str, float]] = field(default_factory=list)


class RamEmulator(RamAuthorizedEmulator):
    """RAM: GetRole, ListPoliciesForRole, GetPolicy (RPC)."""

    api_version = "2015-05-01"
    denial_code = "NoPermission"
    denial_message = "You are not authorized to do this action. You should be authorized by RAM."

    def __init__(
        self, access_keys: Mapping[str, str | None] | None = None, account_id: str = DEFAULT_ACCOUNT_ID
    ) -> None:
        super().__init__(access_keys)
        self.account_id = account_id
        self.roles: dict[str, EmulatedRole] = {}
        self.policies: dict[tuple[str, str], EmulatedPolicy] = {}
        self.add_rpc_action("GetRole", self._get_role, ram_models.GetRoleResponseBody)
        self.add_rpc_action(
            "ListPoliciesForRole", self._list_policies_for_role, ram_models.ListPoliciesForRoleResponseBody
        )
        self.add_rpc_action("GetPolicy", self._get_policy, ram_models.GetPolicyResponseBody)

    # ----------------------------------------------------------------------------- setup

    def add_role(self, role_name: str, description: str = "") -> str:
        """Create a role trusted by PAI; return its ARN."""
        with self._lock:
            self.roles[role_name] = EmulatedRole(role_name, _role_id(role_name), self.clock(), description)
            return self.role_arn(role_name)

    def attach_policy(
        self, role_name: str, policy_name: str, document: dict[str, Any], policy_type: str = "Custom"
    ) -> None:
        """Create (or replace) a policy with ``document`` and attach it to the role."""
        if policy_type not in POLICY_TYPES:
            raise ValueError(f"policy_type must be one of {sorted(POLICY_TYPES)}")
        with self._lock:
            role = self.roles[role_name]
            now = self.clock()
            self.policies[(policy_type, policy_name)] = EmulatedPolicy(
                policy_name, policy_type, document, now
            )
            role.attached = [a for a in role.attached if a[:2] != (policy_type, policy_name)]
            role.attached.append((policy_type, policy_name, now))

    def role_arn(self, role_name: str) -> str:
        """The ARN RAM gives the role: the account id and the lower-cased name."""
        return f"acs:ram::{self.account_id}:role/{role_name.lower()}"

    # ----------------------------------------------------------------------------- handlers

    def _role(self, request: ApiRequest) -> EmulatedRole:
        name = request.query.get("RoleName", "")
        if name not in self.roles:
            raise ApiError(404, "EntityNotExist.Role", f"The role does not exist: {name}.")
        return self.roles[name]

    def _get_role(self, request: ApiRequest) -> dict[str, Any]:
        role = self._role(request)
        created = iso_utc(role.created_at)
        return {
            "Role": {
                "RoleName": role.name,
                "RoleId": role.role_id,
                "Arn": self.role_arn(role.name),
                "Description": role.description,
                "AssumeRolePolicyDocument": json.dumps(role.trust_policy),
                "MaxSessionDuration": 3600,
                "CreateDate": created,
                "UpdateDate": created,
            }
        }

    def _list_policies_for_role(self, request: ApiRequest) -> dict[str, Any]:
        role = self._role(request)
        items = [self._attachment(policy_type, name, at) for policy_type, name, at in role.attached]
        return {"Policies": {"Policy": items}}

    def _attachment(self, policy_type: str, name: str, attached_at: float) -> dict[str, Any]:
        policy = self.policies[(policy_type, name)]
        return {
            "PolicyName": name,
            "PolicyType": policy_type,
            "Description": policy.description,
            "DefaultVersion": "v1",
            "AttachDate": iso_utc(attached_at),
        }

    def _get_policy(self, request: ApiRequest) -> dict[str, Any]:
        name, policy_type = request.query.get("PolicyName", ""), request.query.get("PolicyType", "")
        if policy_type not in POLICY_TYPES:
            raise ApiError(400, "InvalidParameter.PolicyType", "The parameter - PolicyType is invalid.")
        policy = self.policies.get((policy_type, name))
        if policy is None:
            raise ApiError(404, "EntityNotExist.Policy", f"The policy does not exist: {name}.")
        created = iso_utc(policy.created_at)
        return {
            "Policy": {
                "PolicyName": name,
                "PolicyType": policy_type,
                "Description": policy.description,
                "DefaultVersion": "v1",
                "AttachmentCount": self._attachment_count(policy),
                "CreateDate": created,
                "UpdateDate": created,
            },
            "DefaultPolicyVersion": {
                "VersionId": "v1",
                "IsDefaultVersion": True,
                "PolicyDocument": json.dumps(policy.document),
                "CreateDate": created,
            },
        }

    def _attachment_count(self, policy: EmulatedPolicy) -> int:
        key = (policy.policy_type, policy.name)
        return sum(1 for role in self.roles.values() if any(a[:2] == key for a in role.attached))


def _role_id(role_name: str) -> str:
    """A stable numeric RoleId (RAM's are 17-19 digit strings)."""
    return str(300_000_000_000_000_000 + zlib.crc32(role_name.encode()))
