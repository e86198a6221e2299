"""Turn a run's trigger-form parameters into everything its stages need, validated up front.

The first task of a retraining DAG calls ``resolve_run``: one place decides the dataset version,
the training spec for the chosen backend, the backend's settings and where outputs go. A bad
value fails that task, naming the field and its fix, before anything is copied or submitted.

Cloud settings come from one environment file per backend (``include/config/dlc.json``: workspace,
quota, VPC, image, registry connection; ``include/config/arena.json``: kubernetes connection,
namespace, PVC, RDMA resource, NCCL env), parsed by ``aliyun_training.environments``. They are an
administrator's settings: the form is untrusted input, typed by ``aliyun_training.form``, and may
change only the allow-listed ``backend_overrides`` and pin an image of the environment's own
repositories. Empty strings in a file mean "not configured".

A cloud environment's ``staging`` block turns on staging from OSS onto CPFS: ``mode`` is where the
copy runs (``direct`` on a worker that mounts CPFS, ``pod`` in a pod on ACK, ``dataflow`` by a CPFS
data flow import), ``source_uri`` is a template with ``{dataset}`` and ``{version}``. The staged
version is then registered for the backend (a PAI dataset version on DLC, a PV and PVC on ACK) and
the job mounts it instead of the environment's fixed dataset. An empty ``mode`` keeps the fixed
dataset.

Cloud jobs write to ``output_root`` on their nodes, which are gone when the run publishes. An
environment's ``output_uri`` is the OSS location mounted read-write at ``output_root`` on every node
(a DLC DataSources entry; on ACK the OSS-backed claim ``output_pvc``), so the artifacts stage reads a
job's outputs from OSS and publishes them under ``artifact_root``. Either left blank, the run still
trains and the artifacts stage is skipped, naming the setting to fill in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aliyun_training.environments import CloudEnvironment, DlcEnvironment, load_environment
from aliyun_training.form import RunForm, parse_form
from aliyun_training.settings import LocalPaths
from aliyun_training.spec import Backend, FixedDataset, SpecError, TrainingJobSpec

#: The training command every backend runs; only the per-node process count differs.
TORCHRUN = (
    "torchrun --nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
    "--master_port=$MASTER_PORT --nproc_per_node={procs} include/training/cifar10_ddp.py "
    "--epochs {epochs} --batch-size {batch_size}"
)


def resolve_run(
    params: dict[str, Any],
    run_date: str,
    project_dir: str,
    paths: LocalPaths,
    environments: dict[str, Path],
    dataset: str = "cifar10",
) -> dict[str, Any]:
    """Everything the stages of one run need, as JSON; raises SpecError on any bad value."""
    form = parse_form(params)
    params = form.model_dump(mode="json")
    version = form.dataset_version or run_date
    command = TORCHRUN.format(
        procs=max(form.gpus_per_node, 1), epochs=form.epochs, batch_size=form.batch_size
    )
    common = {
        "backend": form.backend,
        "nodes": form.nodes,
        "gpus_per_node": form.gpus_per_node,
        "command": command,
        "timeout_minutes": form.timeout_minutes,
    }
    staging_root = paths.cpfs / "datasets" / dataset
    source_uri = f"file://{paths.object_store / dataset / version}/"
    preflight: dict[str, Any] = {"source_uri": source_uri, "target_root": str(staging_root)}
    overrides = form.overrides()
    if form.backend == Backend.DLC:
        env = _environment(environments["dlc"], "dlc", form, overrides)
        spec, backend_config, output_root = _dlc_run(common, env, version)
        preflight.update(
            lingjun_regions=env.get("lingjun_regions") or [],
            zone_id=env.get("zone_id"),
            role_name=env.get("role_name"),
            policy_file=str(Path(project_dir, "include", "config", "dlc_role_policy.json")),
        )
    elif form.backend == Backend.ARENA:
        env = _environment(environments["arena"], "arena", form, overrides)
        spec, backend_config, output_root = _arena_run(common, env, version)
    else:
        spec = {
            **common,
            "working_dir": project_dir,
            "env": {"DATA_DIR": str(staging_root / version)},
        }
        backend_config, output_root = {}, str(paths.outputs)
    if params["backend"] == Backend.LOCAL:
        artifacts: dict[str, Any] = {
            "artifact_root": str(paths.artifacts),
            "output_uri": None,
            "artifacts_unavailable": None,
            "fixed_dataset": None,
            "oss_conn_id": "alibaba_cloud_default",
        }
    else:
        artifacts = {
            "fixed_dataset": _fixed_dataset(params["backend"], env, spec, version),
            **_cloud_outputs(params["backend"], env, spec, output_root, environments[params["backend"]].name),
        }
    TrainingJobSpec.parse(spec)
    if params["backend"] == Backend.LOCAL:
        staging = {
            "mode": "direct",
            "source_uri": source_uri,
            "target_root": str(staging_root),
            "remote": {},
            "register": None,
        }
        mount_path = None
    else:
        staging = _cloud_staging(params["backend"], env, dataset, version)
        mount_path = _mount_path(params["backend"], env)
    image_stages = _image_stages(params, env) if params["backend"] != Backend.LOCAL else {}
    return {
        "backend": params["backend"],
        "dataset_version": version,
        **image_stages,
        "source_uri": staging["source_uri"],
        "staging_root": staging["target_root"],
        "staging_mode": staging["mode"],
        "staging_remote": staging["remote"],
        "staging_register": staging["register"],
        "dataset_mount_path": mount_path,
        **artifacts,
        "output_root": output_root,
        "spec": spec,
        "backend_config": backend_config,
        "preflight": preflight,
    }


def _environment(path: Path, backend: str, form: RunForm, overrides: dict[str, Any]) -> dict[str, Any]:
    """The backend's environment file with the run's allow-listed overrides, as plain settings."""
    environment = load_environment(path, backend)
    quota = overrides.get("quota_id")
    if quota is not None and isinstance(environment, DlcEnvironment):
        offered = [q for q in (environment.quota_id, *environment.allowed_quota_ids) if q]
        if quota not in offered:
            raise SpecError(
                f"backend_overrides.quota_id: {quota!r} is not a quota this environment offers "
                f"(fix: use one of {offered}; an administrator adds quotas to allowed_quota_ids in "
                f"{path.name})"
            )
    if form.image:
        _check_pinned_image(form.image, environment, path.name)
    return environment.model_copy(update=overrides).model_dump()


def _check_pinned_image(image: str, environment: CloudEnvironment, environment_file: str) -> None:
    """A pinned image must come from a repository the environment already trusts with the job."""
    from aliyun_training.image.context import image_repository

    trusted = {
        image_repository(ref)
        for ref in (
            environment.image,
            environment.image_build.repository,
            *environment.allowed_image_repositories,
        )
        if ref
    }
    if image_repository(image) not in trusted:
        raise SpecError(
            f"image: {image!r} is not from a repository of this environment (fix: pin a tag or digest of "
            f"{sorted(trusted) or 'the environment image'}; an administrator adds repositories to "
            f"allowed_image_repositories in {environment_file})"
        )


def _fixed_dataset(
    backend: str, env: dict[str, Any], spec: dict[str, Any], version: str
) -> dict[str, Any] | None:
    """The environment's dataset a job mounts when the run stages nothing, for the artifact manifest."""
    if _stages(env):
        return None
    mount = spec["datasets"][0] if spec["datasets"] else {}
    return FixedDataset(
        version=version,
        uri=mount.get("uri"),
        dataset_id=mount.get("dataset_id"),
        mount_path=_mount_path(backend, env),
    ).model_dump(mode="json")


def _cloud_outputs(
    backend: str, env: dict[str, Any], spec: dict[str, Any], output_root: str, environment: str
) -> dict[str, Any]:
    """Mount ``output_uri`` at ``output_root`` in ``spec`` and say where artifacts go; checked now.

    Returns the artifacts stage's settings: ``output_uri`` as ``oss://bucket/prefix/`` (a DLC mount
    may name the bucket's endpoint too), ``artifact_root``, and why nothing can be published when
    either is blank.
    """
    from aliyun_training.staging.oss import OssLocation, parse_oss_uri

    output_uri, artifact_root, output_pvc = (
        env.get(k) for k in ("output_uri", "artifact_root", "output_pvc")
    )
    if not output_root.startswith("/"):
        raise SpecError(
            f"output_root: {output_root!r} is not an absolute path (fix: e.g. /mnt/output/cifar10)"
        )
    if artifact_root:
        parse_oss_uri(artifact_root, field="artifact_root")
    if backend == Backend.ARENA:
        _check_output_pvc(output_uri, output_pvc, env.get("data_pvc"))
    bucket_uri = None
    if output_uri:
        location = parse_oss_uri(output_uri, field="output_uri")
        bucket_uri = OssLocation(location.bucket_name, location.prefix).uri
        mount = f"pvc://{output_pvc}" if backend == Backend.ARENA else output_uri
        spec["datasets"] = [*spec["datasets"], {"uri": mount, "mount_path": output_root, "read_only": False}]
    fixes = {
        "output_uri": "set output_uri to the OSS location mounted at output_root, e.g. oss://bucket/outputs/"
        + (", and output_pvc to the OSS-backed claim of that location" if backend == Backend.ARENA else ""),
        "artifact_root": "set artifact_root to where artifact sets go, e.g. oss://bucket/models/",
    }
    blank = [name for name in fixes if not env.get(name)]
    unavailable = (
        f"artifacts of {backend} runs are not collected: {' and '.join(blank)} left blank in "
        f"{environment} (fix: {'; '.join(fixes[name] for name in blank)})"
        if blank
        else None
    )
    return {
        "artifact_root": artifact_root,
        "output_uri": bucket_uri,
        "artifacts_unavailable": unavailable,
        # ACK environments name a kubernetes connection; OSS is reached through the default one.
        "oss_conn_id": (env.get("connection_id") if backend == Backend.DLC else None)
        or "alibaba_cloud_default",
    }


def _check_output_pvc(output_uri: str | None, output_pvc: str | None, data_pvc: str | None) -> None:
    """On ACK the claim mounts the outputs and ``output_uri`` says where they are: both or neither."""
    if output_uri and not output_pvc:
        raise SpecError(
            "output_pvc: output_uri is set but no claim mounts it on the job's nodes (fix: set "
            "output_pvc to an OSS-backed PVC whose volume is output_uri, or leave output_uri blank)"
        )
    if output_pvc and not output_uri:
        raise SpecError(
            f"output_uri: output_pvc {output_pvc!r} is set but not which OSS location backs it (fix: "
            "set output_uri to the bucket and path of the claim's volume, e.g. oss://bucket/outputs/)"
        )
    if output_pvc and output_pvc == data_pvc:
        raise SpecError(
            f"output_pvc: {output_pvc!r} is also data_pvc (fix: use an OSS-backed claim of its own)"
        )


def _mount_path(backend: str, env: dict[str, Any]) -> str:
    if backend == Backend.DLC:
        return (env.get("dataset") or {}).get("mount_path") or "/mnt/data"
    return env.get("mount_path") or "/mnt/data"


def _image_stages(params: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """Settings of the image build and the RDMA bandwidth check, checked before anything runs."""
    from aliyun_training.image.context import image_reference
    from aliyun_training.remote import remote_run

    block = env.get("image_build") or {}
    mode = block.get("mode")
    builder = _builder_settings(mode, block, env)
    pinned = params.get("image")
    if mode and not pinned:
        allowed = ("acr",) if params["backend"] == Backend.DLC else ("kaniko", "acr")
        if mode not in allowed:
            raise SpecError(
                f"image_build.mode: {mode!r} is not available on {params['backend']} "
                f"(fix: use one of {allowed})"
            )
        if mode == "acr" and block.get("base_image"):
            raise SpecError(
                "image_build.base_image: ACR builds with its build rule's own BuildArgs "
                "(fix: set BASE_IMAGE on the build rule in the ACR console and leave base_image empty)"
            )
        reference = image_reference(block.get("repository") or "", "0" * 16)
        trial = {
            "tag": "0" * 16,
            **({"destination": reference} if mode == "kaniko" else {"image": reference}),
        }
        remote_run("image", mode, {**builder, **trial})
    rdma = env.get("rdma_check") or {}
    return {
        "image_build_mode": mode,
        "image_repository": block.get("repository"),
        "image_builder": builder,
        "image_build_args": {"BASE_IMAGE": block["base_image"]} if block.get("base_image") else {},
        "image_registry_conn_id": block.get("registry_conn_id") or env.get("image_registry_conn_id"),
        "image_fixed": env.get("image"),
        "image_pinned": pinned,
        "image_force_rebuild": bool(params.get("force_rebuild")),
        "rdma_line_rate_gbps": float(rdma.get("line_rate_gbps") or 200),
        "rdma_pass_ratio": float(rdma.get("pass_ratio") or 0.9),
        "rdma_device": rdma.get("device") or "mlx5_0",
        "rdma_gid_index": int(rdma.get("gid_index") or 3),
        "rdma_skip": bool(params.get("skip_bandwidth_check")),
    }


def _builder_settings(mode: str | None, block: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """The builder's own block, plus where it runs: the environment's cluster or connection."""
    if not mode:
        return {}
    own = {key: value for key, value in (block.get(mode) or {}).items() if value is not None}
    if mode == "kaniko":
        inherited = {
            "kubernetes_conn_id": env.get("connection_id") or "kubernetes_default",
            "namespace": env.get("namespace") or "default",
            "image_pull_secrets": env.get("image_pull_secrets") or [],
        }
    else:
        inherited = {"alibaba_cloud_conn_id": env.get("connection_id") or "alibaba_cloud_default"}
    return {**inherited, **own}


def _stages(env: dict[str, Any]) -> bool:
    """Whether a cloud environment stages each version (else the job mounts its fixed dataset)."""
    return bool((env.get("staging") or {}).get("mode"))


def _cloud_staging(backend: str, env: dict[str, Any], dataset: str, version: str) -> dict[str, Any]:
    """The staging task's settings for a cloud backend; mode None when the environment stages nothing."""
    block = env.get("staging") or {}
    mode = block.get("mode")
    if not mode:
        return {"mode": None, "source_uri": None, "target_root": None, "remote": {}, "register": None}
    allowed = ("direct", "dataflow") if backend == Backend.DLC else ("direct", "pod")
    if mode not in allowed:
        raise SpecError(f"staging.mode: {mode!r} is not available on {backend} (fix: use one of {allowed})")
    template = block.get("source_uri")
    if not template or not template.startswith("oss://"):
        raise SpecError(
            "staging.source_uri: give the OSS location of each version "
            "(fix: e.g. oss://my-bucket/datasets/{dataset}/{version}/)"
        )
    target_root = block.get("target_root")
    if not target_root or not target_root.startswith("/"):
        raise SpecError(
            "staging.target_root: give where the versions go on CPFS "
            "(fix: an absolute path, e.g. /mnt/cpfs/datasets/cifar10)"
        )
    source_uri = template.format(dataset=dataset, version=version)
    cpfs_path = block.get("cpfs_path") or (target_root if mode == "dataflow" else None)
    if backend == Backend.DLC:
        remote = (
            {k: block.get(k) for k in ("file_system_id", "data_flow_id")}
            | {"alibaba_cloud_conn_id": env.get("connection_id") or "alibaba_cloud_default"}
            if mode == "dataflow"
            else {}
        )
        register = {
            "kind": "pai_dataset",
            "workspace_id": env.get("workspace_id"),
            "name": dataset,
            "uri_kind": block.get("uri_kind") or "bmcpfs",
            **{
                k: block.get(k)
                for k in ("file_system_id", "mount_target", "protocol_service_id", "export_id")
            },
            "cpfs_path": cpfs_path,
            "provider_type": "Lingjun" if (env.get("resource_type") or "lingjun") == "lingjun" else "Ecs",
            "mount_path": _mount_path(backend, env),
        }
    else:
        remote = (
            {
                "kubernetes_conn_id": env.get("connection_id") or "kubernetes_default",
                "namespace": env.get("namespace") or "default",
                "dataset": dataset,
                **{
                    k: block.get(k)
                    for k in ("staging_pvc", "image", "credentials_secret", "region", "oss_endpoint")
                },
            }
            if mode == "pod"
            else {}
        )
        register = {
            "kind": "pvc",
            "kubernetes_conn_id": env.get("connection_id") or "kubernetes_default",
            "namespace": env.get("namespace") or "default",
            "dataset": dataset,
            "cpfs_path": cpfs_path,
            **{
                k: block.get(k)
                for k in ("volume_kind", "server", "file_system_id", "vpc_mount_target", "vsc_mount_target")
            },
        }
    staging = {"mode": mode, "source_uri": source_uri, "target_root": target_root, "remote": remote}
    _check_staging(mode, staging, register, version, env.get("region"))
    return {**staging, "register": register}


def _check_staging(
    mode: str, staging: dict[str, Any], register: dict[str, Any], version: str, region: str | None
) -> None:
    """Fail now, naming the setting, rather than in the staging task or after the whole copy."""
    from aliyun_training.remote import remote_run
    from aliyun_training.staging.registration import check_registration

    if mode != "direct":
        settings = {
            **staging["remote"],
            "source_uri": staging["source_uri"],
            "target_root": staging["target_root"],
        }
        remote_run("staging", mode, {**settings, "version": version})
    check_registration(register, version, region)


def _dlc_run(
    common: dict[str, Any], env: dict[str, Any], version: str
) -> tuple[dict[str, Any], dict[str, Any], str]:
    dataset = env.get("dataset") or {}
    mount_path = dataset.get("mount_path") or "/mnt/data"
    datasets = (
        [{"dataset_id": dataset.get("dataset_id"), "uri": dataset.get("uri"), "mount_path": mount_path}]
        if (dataset.get("dataset_id") or dataset.get("uri")) and not _stages(env)
        else []
    )
    spec = {
        **common,
        **_cluster_resources(env),
        "resource_type": env.get("resource_type") or "lingjun",
        "quota_id": env.get("quota_id"),
        "ecs_spec": env.get("ecs_spec"),
        "gpu_type": env.get("gpu_type"),
        "priority": env.get("priority") or 1,
        "datasets": datasets,
        "env": {"DATA_DIR": f"{mount_path.rstrip('/')}/{version}"},
    }
    vpc = env.get("vpc") or {}
    backend_config = {
        "conn_id": env.get("connection_id") or "alibaba_cloud_default",
        "region": env.get("region"),
        "workspace_id": env.get("workspace_id"),
        "vpc": vpc if all(vpc.get(k) for k in ("vpc_id", "switch_id", "security_group_id")) else None,
        "image_registry_conn_id": env.get("image_registry_conn_id"),
    }
    return spec, backend_config, env.get("output_root") or "/mnt/output"


def _cluster_resources(env: dict[str, Any]) -> dict[str, Any]:
    """Per-node resources and image, named the same in every cloud environment file."""
    return {
        "image": env.get("image"),
        "cpu": env.get("cpu_per_node") or 8,
        "memory_gib": env.get("memory_gib_per_node") or 32,
        "shared_memory_gib": env.get("shared_memory_gib_per_node") or 0,
        "rdma": bool(env.get("rdma")),
        "working_dir": env.get("code_dir"),
    }


def _arena_run(
    common: dict[str, Any], env: dict[str, Any], version: str
) -> tuple[dict[str, Any], dict[str, Any], str]:
    from aliyun_training.backends.arena_manifests import arena_settings

    mount_path = env.get("mount_path") or "/mnt/data"
    pvc = env.get("data_pvc")
    if not pvc and not _stages(env):
        raise SpecError(
            "data_pvc: the arena environment names no PVC holding the dataset (fix: set data_pvc in the "
            "environment file arena.json, or a staging block that stages each version)"
        )
    spec = {
        **common,
        **_cluster_resources(env),
        # A staged version is mounted from its own claim instead (see mount_staged).
        "datasets": [] if _stages(env) else [{"uri": f"pvc://{pvc}", "mount_path": mount_path}],
        "env": {"DATA_DIR": f"{mount_path.rstrip('/')}/{version}"},
    }
    backend_config = {
        "conn_id": env.get("connection_id") or "kubernetes_default",
        "namespace": env.get("namespace") or "default",
        "rdma_resource": env.get("rdma_resource") or "rdma/hca",
        "host_network": bool(env.get("host_network")),
        "nccl_env": env.get("nccl_env") or {},
        "image_pull_secrets": env.get("image_pull_secrets") or [],
        "mpi_api_version": env.get("mpi_api_version") or "v2beta1",
        "max_gpus_per_node": env.get("max_gpus_per_node") or 8,
        "username": env.get("username") or "airflow",
    }
    # The cluster's own rules (names, NCCL variables, API versions) are checked before anything runs.
    arena_settings(backend_config)
    return spec, backend_config, env.get("output_root") or "/mnt/data/outputs"
