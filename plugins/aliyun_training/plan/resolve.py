"""Turn a run's trigger form and its backend's environment file into the run's plan, checked up front.

The first task of a retraining DAG calls :func:`resolve_run`: the form is parsed (it is untrusted
input, see ``aliyun_training.form``), the dataset version chosen, and the run's backend plans its
own job (``plan.local``, ``plan.dlc``, ``plan.arena``). A bad value fails that task, naming the
field and its fix, before anything is copied or submitted.

Cloud settings come from one environment file per backend (``include/config/dlc.json``,
``include/config/arena.json``), parsed by ``aliyun_training.environments``; the form may change
only what ``RunOverrides`` allows and pin an image of the environment's own repositories.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aliyun_training.form import RunForm, parse_form
from aliyun_training.plan.models import RunPlan
from aliyun_training.settings import LocalPaths
from aliyun_training.spec import Backend
from aliyun_training.validation import SpecError

#: The training command every backend runs; only the per-node process count differs.
TORCHRUN = (
    "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
    "--master_port=$MASTER_PORT --nproc_per_node={procs} include/training/cifar10_ddp.py "
    "--epochs {epochs} --batch-size {batch_size}"
)


@dataclass(frozen=True)
class PlanRequest:
    """What a backend's planner works from: the typed form and the deployment's settings."""

    form: RunForm
    #: The dataset version the run trains on.
    version: str
    #: The dataset's name: ``{dataset}`` of a source URI template, the PAI dataset's name.
    dataset: str
    #: The model the artifact sets are published under.
    model: str
    project_dir: str
    paths: LocalPaths
    #: The backend's environment file (the local backend's may be absent: its defaults apply).
    environment: Path

    @property
    def job(self) -> dict[str, Any]:
        """The job settings every backend takes from the form."""
        form = self.form
        return {
            "backend": form.backend,
            "nodes": form.nodes,
            "gpus_per_node": form.gpus_per_node,
            "command": TORCHRUN.format(
                procs=max(form.gpus_per_node, 1), epochs=form.epochs, batch_size=form.batch_size
            ),
            "timeout_minutes": form.timeout_minutes,
        }


Planner = Callable[[PlanRequest], RunPlan]


def _planners() -> dict[Backend, Planner]:
    from aliyun_training.plan import arena, dlc, local

    return {Backend.LOCAL: local.plan_run, Backend.DLC: dlc.plan_run, Backend.ARENA: arena.plan_run}


def resolve_run(
    params: dict[str, Any],
    run_date: str,
    project_dir: str,
    paths: LocalPaths,
    environments: dict[str, Path],
    dataset: str = "cifar10",
    model: str = "cifar10",
) -> RunPlan:
    """The run's plan; raises SpecError naming every bad value and its fix."""
    form = parse_form(params)
    environment = environments.get(form.backend.value)
    if environment is None:
        raise SpecError(f"backend: {form.backend.value!r} has no environment file in this deployment")
    request = PlanRequest(
        form=form,
        version=form.dataset_version or run_date,
        dataset=dataset,
        model=model,
        project_dir=project_dir,
        paths=paths,
        environment=environment,
    )
    plan = _planners()[form.backend](request)
    return plan.model_copy(update={"dry_run": form.dry_run, "skip_preflight": form.skip_preflight})
