"""NVIDIA Dynamo: one DynamoGraphDeployment manifest (Kubernetes) with a worker service per pool.

Shaped as Dynamo's own examples (`../shared/reference/engines/`): a `Frontend` service, and per pool a
`worker` service with `replicas`, `multinode.nodeCount` when an instance spans nodes, `resources.limits.gpu`
its GPUs per node, and the worker command of the backend (`python3 -m dynamo.trtllm|sglang|vllm`). Engine
config files (TensorRT-LLM options, load balancers, SGLang expert locations) travel in a ConfigMap
mounted at /config.
"""

from __future__ import annotations

import json
from typing import Any

from costmodel.resolve import runs_on
from planner.export import sglang, trtllm, vllm
from planner.export.base import (
    ENGINE_VERSIONS,
    Export,
    Plan,
    Pool,
    comment_block,
    dump_yaml,
    dump_yaml_all,
    plan_comments,
    pool_comments,
)

BACKENDS = ("trtllm", "sglang", "vllm")
API_VERSION = "nvidia.com/v1alpha1"
CONFIG_DIR = "/config"
IMAGES = {"trtllm": "tensorrtllm-runtime", "sglang": "sglang-runtime", "vllm": "vllm-runtime"}


def backend_of(plan: Plan, requested: str | None) -> str:
    """The worker backend: as asked, else the scenario's engine, else TensorRT-LLM (vLLM where a pool runs on
    GPUs TensorRT-LLM does not run on: AMD's)."""
    if requested is not None:
        return requested
    engine = str(plan.resolved.scenario.engine)
    if engine in BACKENDS:
        return engine
    return "trtllm" if all(runs_on("trtllm", pool.system) for pool in plan.pools) else "vllm"


def image(backend: str) -> str:
    return f"nvcr.io/nvidia/ai-dynamo/{IMAGES[backend]}:{ENGINE_VERSIONS['dynamo'][1]}"


def worker_args(plan: Plan, pool: Pool, backend: str) -> tuple[list[str], dict[str, str]]:
    """Worker arguments of one pool and the config files (name -> text) they read from /config."""
    mode = "agg" if pool.engine_role == "aggregated" else pool.engine_role
    if backend == "trtllm":
        files = {name: dump_yaml(data)
                 for name, data in trtllm.configs(plan, pool, CONFIG_DIR).items()}
        args = ["--model", plan.model, "--served-model-name", plan.model,
                "--extra-engine-args", f"{CONFIG_DIR}/{trtllm.file_names(pool)[0]}", "--disaggregation-mode", mode]
        return args, files
    if backend == "sglang":
        placement = sglang.placement_json(plan, pool)
        name = sglang.placement_name(pool)
        files = {} if placement is None else {name: json.dumps(placement, separators=(",", ":"))}
        path = f"{CONFIG_DIR}/{name}" if placement is not None else None
        args = [*sglang.server_args(plan, pool, path, node_flags=False), "--served-model-name", plan.model,
                "--host", "0.0.0.0"]
        return args, files
    args = ["--model", plan.model, *vllm.engine_args(plan, pool)]
    if pool.engine_role != "aggregated":
        args += ["--disaggregation-mode", mode]
    return args, {}


def service(plan: Plan, pool: Pool, backend: str, args: list[str], mounted: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"image": image(backend), "workingDir": "/workspace",
                                 "command": ["python3", "-m", f"dynamo.{backend}"], "args": args}
    spec: dict[str, Any] = {"componentType": "worker", "replicas": pool.replicas, "envFromSecret": "hf-token-secret",
                            "resources": {"limits": {"gpu": str(pool.gpus_per_node)}}}
    if pool.nodes_per_instance > 1:
        spec["multinode"] = {"nodeCount": pool.nodes_per_instance}
    pod: dict[str, Any] = {"mainContainer": container}
    if mounted:
        pod["volumes"] = [{"name": "plan-config", "configMap": {"name": _config_map_name(plan)}}]
        container["volumeMounts"] = [{"name": "plan-config", "mountPath": CONFIG_DIR, "readOnly": True}]
    spec["extraPodSpec"] = pod
    return spec


def manifest(plan: Plan, backend: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The ConfigMap (when any file is needed) and the DynamoGraphDeployment, and the comments."""
    frontend = {"componentType": "frontend", "replicas": 1, "extraPodSpec": {"mainContainer": {
        "image": image(backend), "command": ["python3", "-m", "dynamo.frontend"], "args": ["--http-port", "8000"]}}}
    services: dict[str, Any] = {"Frontend": frontend}
    files: dict[str, str] = {}
    comments = plan_comments(plan)
    per_pool = [(pool, *worker_args(plan, pool, backend)) for pool in plan.pools]
    mounted = any(pool_files for _, _, pool_files in per_pool)
    for pool, args, pool_files in per_pool:
        files.update(pool_files)
        services[pool.name] = service(plan, pool, backend, args, mounted)
        comments += [f"service {pool.name}: " + line for line in pool_comments(plan, pool, operator=True)]
        comments += [f"service {pool.name}: " + line for line in _unexpressed(plan, pool, backend)]
    deployment = {"apiVersion": API_VERSION, "kind": "DynamoGraphDeployment",
                  "metadata": {"name": _name(plan)},
                  "spec": {"backendFramework": backend, "envs": [{"name": "HF_HOME", "value": "/models"}],
                           "services": services}}
    documents: list[dict[str, Any]] = []
    if files:
        documents.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": _config_map_name(plan)},
                          "data": files})
    return [*documents, deployment], comments


def _unexpressed(plan: Plan, pool: Pool, backend: str) -> list[str]:
    if backend == "trtllm":
        return trtllm.unexpressed(plan, pool)
    if backend == "vllm":
        return vllm.unexpressed(plan, pool)
    return sglang.unexpressed(plan, pool)


def _name(plan: Plan) -> str:
    raw = f"{plan.resolved.scenario.name}-{plan.path.stem}".lower()
    cleaned = "".join(c if c.isalnum() else "-" for c in raw).strip("-")
    return cleaned[:63].rstrip("-")


def _config_map_name(plan: Plan) -> str:
    return f"{_name(plan)[:56].rstrip('-')}-config"


def export(plan: Plan, backend: str | None = None) -> Export:
    chosen = backend_of(plan, backend)
    documents, comments = manifest(plan, chosen)
    out = Export("dynamo")
    out.configs["dynamo-deployment.yaml"] = {"documents": documents}
    out.unexpressed = [c for pool in plan.pools for c in _unexpressed(plan, pool, chosen)]
    amd = sorted({pool.system.name for pool in plan.pools if pool.system.vendor == "amd"})
    if amd:  # Dynamo publishes CUDA runtime images only (nvcr.io/nvidia/ai-dynamo)
        out.unexpressed.append(f"the worker image {image(chosen)} is a CUDA build: on {', '.join(amd)} (AMD) replace "
                               f"it with a ROCm build of {chosen} with Dynamo's runtime")
    head = comment_block([f"DynamoGraphDeployment (ai-dynamo=={ENGINE_VERSIONS['dynamo'][1]}, backend {chosen}) "
                          "written by `plan export`; apply with kubectl apply -f", *comments])
    body = dump_yaml_all(documents)
    out.files["dynamo-deployment.yaml"] = head + body
    return out
