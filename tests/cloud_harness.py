"""An emulated Alibaba Cloud account: DLC, VPC/ECS, PAI Studio and RAM emulators behind one connection.

The ``alibaba_cloud_default`` connection points every service at its emulator over HTTP, and the
account holds a complete Lingjun setup: a network every preflight check passes, a quota with room
and a RAM role with the reference DLC policy. Tests then break one piece at a time.

Also the training job specs the tests submit to DLC and to ACK (arena), each test adding its own fields.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.emulators.dlc import DlcEmulator
from tests.emulators.network import NetworkEmulator, StandardNetwork
from tests.emulators.paistudio import PaiStudioEmulator
from tests.emulators.ram import RamEmulator

AK, SK = "LTAI-preflight", "preflight-secret-value"
POLICY_FILE = Path(__file__).resolve().parents[1] / "include" / "config" / "dlc_role_policy.json"
ROLE = "pai-dlc-runner"
QUOTA = "quota1"
#: The image the training job specs run.
TRAIN_IMAGE = "registry.example.com/train/pytorch:2.13-rdma"


@dataclass
class Cloud:
    network: NetworkEmulator
    studio: PaiStudioEmulator
    ram: RamEmulator
    dlc: DlcEmulator
    ids: StandardNetwork


@contextlib.contextmanager
def emulated_cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    keys = {AK: SK}
    with (
        NetworkEmulator(keys) as network,
        PaiStudioEmulator(keys) as studio,
        RamEmulator(keys) as ram,
        DlcEmulator(keys) as dlc,
    ):
        ids = network.standard()
        studio.add_quota(QUOTA, resource_type="Lingjun", gpu_type="GU8TF", allocatable_gpus=64)
        ram.add_role(ROLE)
        ram.attach_policy(
            ROLE, "AliyunPAIDLCDefaultRolePolicy", json.loads(POLICY_FILE.read_text())["policy"]
        )
        endpoints = {
            "vpc": network.endpoint,
            "ecs": network.endpoint,
            "paistudio": studio.endpoint,
            "ram": ram.endpoint,
            "dlc": dlc.endpoint,
        }
        use_alibaba_connection(
            monkeypatch, endpoints, AK, SK, retry={"max_attempts": 3, "base_delay": 0.01, "max_delay": 0.02}
        )
        yield Cloud(network, studio, ram, dlc, ids)


def use_alibaba_connection(
    monkeypatch: pytest.MonkeyPatch,
    endpoints: dict[str, str],
    access_key_id: str,
    secret: str,
    **extra: object,
) -> None:
    """Point ``alibaba_cloud_default`` at emulators: plain HTTP, short backoff so retries are quick."""
    extras = {
        "access_key_id": access_key_id,
        "access_key_secret": secret,
        "region": "cn-wulanchabu",
        "protocol": "http",
        "endpoints": endpoints,
        "retry": {"max_attempts": 10, "base_delay": 0.01, "max_delay": 0.05},
        **extra,
    }
    connection = json.dumps({"conn_type": "alibaba_cloud", "extra": extras})
    monkeypatch.setenv("AIRFLOW_CONN_ALIBABA_CLOUD_DEFAULT", connection)


# -- training job specs ----------------------------------------------------------------------------


def dlc_job(**fields: Any) -> dict[str, Any]:
    """A DLC job spec on two Lingjun nodes of eight GU8TF GPUs in quota12345, with ``fields`` added."""
    return {
        "backend": "dlc",
        "nodes": 2,
        "gpus_per_node": 8,
        "gpu_type": "GU8TF",
        "cpu": 96,
        "memory_gib": 800,
        "resource_type": "lingjun",
        "quota_id": "quota12345",
        "image": TRAIN_IMAGE,
        **fields,
    }


def arena_job(**fields: Any) -> dict[str, Any]:
    """An ACK (arena) job spec on two nodes of eight GPUs, with ``fields`` added."""
    return {
        "backend": "arena",
        "nodes": 2,
        "gpus_per_node": 8,
        "cpu": 16,
        "memory_gib": 64,
        "image": TRAIN_IMAGE,
        **fields,
    }
