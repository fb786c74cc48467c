"""Renders charts/cowork-fleet with a real Helm engine and validates every manifest offline.

The engine is Helm v4's Go SDK through PyPI's `helm-python-sdk` (libhelm_c, no helm binary, no
cluster). Every rendered Kubernetes object is validated with `kubernetes-validate` against the
Kubernetes 1.33 OpenAPI schemas in strict mode (unknown fields are errors). KEDA's ScaledObject
is a CRD those schemas lack: it is checked against SCALED_OBJECT_SCHEMA below, a subset of the
KEDA v2 CRD written for the fields this chart uses, whose metadata and HPA behavior parts are the
Kubernetes schemas themselves. Run through charts/tests/run.sh, which pins the packages.
"""

from __future__ import annotations

import base64
import copy
import plistlib
import re
import shlex
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from kubernetes_validate.utils import schema_contents

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "cowork-fleet"
K8S_VERSION = "1.33.0"
RELEASE = "fleet"
NAMESPACE = "cowork"
FULLNAME = f"{RELEASE}-cowork-fleet"

# The smallest values that describe an install against an existing NATS and S3.
EXTERNAL_ENDPOINTS: dict[str, Any] = {
    "natsConnection": {"url": "nats://nats.messaging.svc:4222"},
    "s3": {
        "endpoint": "http://minio.storage.svc:9000",
        "accessKeyId": "cowork",
        "secretAccessKey": "s3-secret-value",
    },
    "coordinator": {"apiToken": "api-token-value"},
}


def merged(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Deep-merges overlay into a copy of base, as `helm -f a.yaml -f b.yaml` would."""
    result = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": EXTERNAL_ENDPOINTS,
    "dind": merged(EXTERNAL_ENDPOINTS, {"docker": {"mode": "dind"}}),
    "keda": merged(
        EXTERNAL_ENDPOINTS,
        {
            "natsConnection": {"monitoringEndpoint": "nats.messaging.svc:8222"},
            "keda": {"enabled": True},
            "worker": {"tiers": ["container", "replay", "protocol"], "slots": 6},
        },
    ),
    "existing-secrets": {
        "natsConnection": {
            "url": "nats://nats.messaging.svc:4222",
            "user": "cowork",
            "existingSecret": "nats-auth",
            "credsSecret": "nats-creds",
            "tlsRequired": True,
        },
        "s3": {
            "endpoint": "https://s3.example.internal",
            "accessKeyId": "cowork",
            "existingSecret": "s3-auth",
            "secretAccessKeyKey": "secret-key",
            "virtualHosted": True,
            "createBucket": True,
            "prefix": "fleet-a",
        },
        "coordinator": {"existingSecret": "api-tokens", "podDisruptionBudget": {"enabled": True}},
        "harness": {"existingSecret": "model-credentials", "extraEnv": {"COWORK_AGENT_IMAGE": "agent:1"}},
        "fleet": {"tierCaps": "container=200,replay=50"},
        "docker": {"mode": "dind"},
    },
    "bundled-dependencies": {
        # nats.enabled / minio.enabled with no explicit endpoints: the chart points at the
        # sub-charts' services. The sub-charts are not vendored (no chart repo is reachable
        # here), so only this chart's own objects render.
        "nats": {"enabled": True},
        "minio": {"enabled": True, "existingSecret": "minio-root"},
        "s3": {"accessKeyId": "cowork", "existingSecret": "minio-root", "secretAccessKeyKey": "rootPassword"},
        "coordinator": {"apiToken": "api-token-value"},
        "harness": {"env": {"ANTHROPIC_API_KEY": "sk-test"}},
        "keda": {"enabled": True},
    },
}

# A ScaledObject (keda.sh/v1alpha1) as far as this chart writes one. Unknown fields are errors,
# as in the strict Kubernetes schemas.
_K8S_DEFS = "/api/_definitions.json#/$defs/"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"$ref": _K8S_DEFS + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "behavior": {
                                    "$ref": _K8S_DEFS + "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerBehavior"
                                },
                            },
                        },
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string"},
                            "name": {"type": "string"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            # KEDA reads every trigger parameter as a string.
                            "metadata": _STRING_MAP,
                            "authenticationRef": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": {"type": "string"}, "kind": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        },
    },
}


def validate_scaled_object(doc: dict[str, Any]) -> None:
    definitions = schema_contents(
        "kubernetes-json-schema/v1.33.0-local-strict/_definitions.json", K8S_VERSION
    )
    registry = referencing.Registry().with_resource(
        "/api/_definitions.json", referencing.Resource.from_contents(definitions)
    )
    jsonschema.Draft202012Validator(SCALED_OBJECT_SCHEMA, registry=registry).validate(doc)


def validate_manifest(doc: dict[str, Any]) -> None:
    """Raises if doc is not a valid object of its kind (K8s 1.33, strict)."""
    if doc.get("apiVersion", "").startswith("keda.sh/"):
        validate_scaled_object(doc)
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def render(values: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Renders the chart; returns the objects of each template (NOTES.txt as its text)."""
    with helm.Chart.load(CHART_DIR) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    rendered: dict[str, list[dict[str, Any]]] = {}
    for template, text in manifests.items():
        if template.endswith("NOTES.txt"):
            continue
        rendered[template] = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    return rendered


def objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [doc for docs in render(values).values() for doc in docs]


def notes(values: dict[str, Any]) -> str:
    with helm.Chart.load(CHART_DIR) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for template, text in manifests.items() if template.endswith("NOTES.txt"))


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)} in {[kn(d) for d in docs]}"
    return found[0]


def kn(doc: dict[str, Any]) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    pod = deployment["spec"]["template"]["spec"]
    every = pod.get("containers", []) + pod.get("initContainers", [])
    found = [c for c in every if c["name"] == name]
    assert len(found) == 1, f"container {name} in {kn(deployment)}"
    return found[0]


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in c.get("env", [])}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_rendered_manifest_is_valid(value_set: str) -> None:
    docs = objects(VALUE_SETS[value_set])
    kinds = {doc["kind"] for doc in docs}
    assert {"ServiceAccount", "ConfigMap", "Service", "Deployment"} <= kinds, kinds
    for doc in docs:
        assert doc["metadata"].get("namespace") == NAMESPACE, kn(doc)
        try:
            validate_manifest(doc)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as error:
            pytest.fail(f"{value_set}: {kn(doc)} is invalid: {error}")


def test_validation_rejects_a_broken_manifest() -> None:
    """The validators must be able to fail: a typo'd field and a wrong type are caught."""
    docs = objects(VALUE_SETS["defaults"])
    worker = one(docs, "Deployment", f"{FULLNAME}-worker")
    typo = copy.deepcopy(worker)
    typo["spec"]["template"]["spec"]["terminationGracePeriod"] = 10
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(typo)
    wrong_type = copy.deepcopy(worker)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(wrong_type)
    scaled = one(objects(VALUE_SETS["keda"]), "ScaledObject", f"{FULLNAME}-worker")
    scaled["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 4
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(scaled)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "natsConnection.url is required"),
        ({"natsConnection": {"url": "nats://n:4222"}}, "s3.accessKeyId is required"),
        (merged(EXTERNAL_ENDPOINTS, {"s3": {"secretAccessKey": ""}}), "s3.secretAccessKey is required"),
        (merged(EXTERNAL_ENDPOINTS, {"coordinator": {"apiToken": ""}}), "coordinator.apiToken or coordinator.existingSecret"),
        (merged(EXTERNAL_ENDPOINTS, {"docker": {"mode": "podman"}}), "docker.mode must be hostSocket or dind"),
        (merged(EXTERNAL_ENDPOINTS, {"keda": {"enabled": True}}), "keda.enabled needs natsConnection.monitoringEndpoint"),
        (
            merged(VALUE_SETS["bundled-dependencies"], {"natsConnection": {"user": "cowork", "password": "shared"}}),
            "natsRoles gives each Deployment its own NATS user",
        ),
        (
            merged(VALUE_SETS["bundled-dependencies"], {"natsRoles": {"enabled": False}}),
            "the bundled NATS still asks for the users of docs/nats/cowork-users.conf",
        ),
    ],
)
def test_missing_or_wrong_values_fail_with_a_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


def test_host_socket_mode_mounts_job_dirs_at_the_host_path() -> None:
    docs = objects(VALUE_SETS["defaults"])
    worker = one(docs, "Deployment", f"{FULLNAME}-worker")
    pod = worker["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["docker-socket"]["hostPath"] == {"path": "/var/run/docker.sock", "type": "Socket"}
    data_dir = volumes["data"]["hostPath"]["path"]
    main = container(worker, "worker")
    mounts = {mount["name"]: mount["mountPath"] for mount in main["volumeMounts"]}
    # Sandboxes are siblings on the node's engine: the path inside must be the path outside.
    assert mounts["data"] == data_dir
    env = env_of(main)
    assert env["COWORK_WORK_DIR"]["value"].startswith(data_dir + "/")
    assert env["COWORK_CACHE_DIR"]["value"].startswith(data_dir + "/")
    assert "DOCKER_HOST" not in env
    assert "initContainers" not in pod
    # The node's socket is root-owned and the image's default user is not root.
    assert pod["securityContext"]["runAsUser"] == 0


def test_dind_mode_runs_a_native_sidecar_sharing_the_job_dirs() -> None:
    docs = objects(VALUE_SETS["dind"])
    worker = one(docs, "Deployment", f"{FULLNAME}-worker")
    pod = worker["spec"]["template"]["spec"]
    assert all("hostPath" not in volume for volume in pod["volumes"]), pod["volumes"]
    dind = container(worker, "dind")
    # restartPolicy Always makes it a native sidecar: it stops only after the worker drained.
    assert dind["restartPolicy"] == "Always"
    assert dind["securityContext"]["privileged"] is True
    main = container(worker, "worker")
    assert env_of(main)["DOCKER_HOST"]["value"] == "unix:///var/run/dind/docker.sock"
    assert "--host=unix:///var/run/dind/docker.sock" in dind["args"]
    main_mounts = {mount["name"]: mount["mountPath"] for mount in main["volumeMounts"]}
    dind_mounts = {mount["name"]: mount["mountPath"] for mount in dind["volumeMounts"]}
    assert main_mounts["data"] == dind_mounts["data"]
    assert main_mounts["dind-socket"] == dind_mounts["dind-socket"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_keda_scales_on_each_tier_consumer() -> None:
    docs = objects(VALUE_SETS["keda"])
    worker = one(docs, "Deployment", f"{FULLNAME}-worker")
    assert "replicas" not in worker["spec"], "the ScaledObject owns the replica count"
    scaled = one(docs, "ScaledObject", f"{FULLNAME}-worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    triggers = scaled["spec"]["triggers"]
    assert [t["metadata"]["consumer"] for t in triggers] == ["cowork-container", "cowork-replay", "cowork-protocol"]
    for trigger in triggers:
        assert trigger["type"] == "nats-jetstream"
        assert trigger["metadata"]["stream"] == "COWORK_JOBS"
        assert trigger["metadata"]["natsServerMonitoringEndpoint"] == "nats.messaging.svc:8222"
        assert trigger["metadata"]["lagThreshold"] == "6"
    assert not [doc for doc in objects(VALUE_SETS["defaults"]) if doc["kind"] == "ScaledObject"]


def test_existing_secrets_are_referenced_and_none_is_created() -> None:
    docs = objects(VALUE_SETS["existing-secrets"])
    assert not [doc for doc in docs if doc["kind"] == "Secret"], [kn(d) for d in docs]
    coordinator = container(one(docs, "Deployment", f"{FULLNAME}-coordinator"), "coordinator")
    worker = container(one(docs, "Deployment", f"{FULLNAME}-worker"), "worker")
    for main in (coordinator, worker):
        env = env_of(main)
        assert env["COWORK_S3_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "s3-auth", "key": "secret-key"}
        assert env["COWORK_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "nats-auth"
        assert env["COWORK_NATS_CREDS"]["value"] == "/etc/cowork/nats/nats.creds"
    assert env_of(coordinator)["COWORK_API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "api-tokens"
    # Model credentials go to the worker only.
    assert {"secretRef": {"name": "model-credentials"}} in worker["envFrom"]
    assert all("secretRef" not in source for source in coordinator.get("envFrom", []))
    assert "COWORK_API_TOKEN" not in env_of(worker)


def test_chart_secrets_hold_given_values_and_model_credentials_stay_with_workers() -> None:
    docs = objects(VALUE_SETS["bundled-dependencies"])
    secrets = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "Secret"}
    assert set(secrets) == {FULLNAME, f"{FULLNAME}-harness", ROLES_SECRET}
    assert set(secrets[FULLNAME]["data"]) == {"api-token"}, "the S3 key comes from minio-root"
    assert set(secrets[f"{FULLNAME}-harness"]["data"]) == {"ANTHROPIC_API_KEY"}
    config = one(docs, "ConfigMap", FULLNAME)["data"]
    assert config["COWORK_NATS_URL"] == f"nats://{RELEASE}-nats:4222"
    # The bundled NATS is a three-node JetStream cluster and the fleet asks R3 of it.
    assert config["COWORK_NATS_REPLICAS"] == "3"
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    cluster = defaults["nats"]["config"]["cluster"]
    assert cluster["enabled"] is True and cluster["replicas"] == 3
    assert config["COWORK_S3_ENDPOINT"] == f"http://{RELEASE}-minio:9000"
    scaled = one(docs, "ScaledObject", f"{FULLNAME}-worker")
    assert scaled["spec"]["triggers"][0]["metadata"]["natsServerMonitoringEndpoint"] == f"{RELEASE}-nats.{NAMESPACE}.svc:8222"


# The Secret of the per-role NATS passwords the chart generates (natsRoles).
ROLES_SECRET = f"{RELEASE}-cowork-nats-roles"
ROLE_KEYS = {"coordinator-password", "worker-password", "observer-password"}


def role_refs(main: dict[str, Any]) -> list[dict[str, Any]]:
    """Every secretKeyRef of a container that names the roles Secret, and every envFrom of it."""
    refs = [
        entry["valueFrom"]["secretKeyRef"]
        for entry in main.get("env", [])
        if entry.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == ROLES_SECRET
    ]
    refs += [source["secretRef"] for source in main.get("envFrom", []) if source.get("secretRef", {}).get("name") == ROLES_SECRET]
    return refs


def test_the_bundled_nats_asks_for_per_role_users_by_default() -> None:
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    nats = defaults["nats"]
    # The server includes the shipped users file, carried verbatim.
    assert nats["config"]["merge"] == {"00$include": "cowork-users.conf"}
    users_file = (REPO_ROOT / "docs" / "nats" / "cowork-users.conf").read_text()
    assert nats["configMap"]["merge"]["data"]["cowork-users.conf"] == users_file, (
        "charts/cowork-fleet/values.yaml carries another docs/nats/cowork-users.conf: copy the file in again"
    )
    # Every password the file reads comes from the roles Secret, the generated one by default.
    variables = set(re.findall(r"password: \$([A-Z_]+)", users_file))
    assert variables == set(nats["container"]["env"]), variables
    keys = {entry["valueFrom"]["secretKeyRef"]["key"] for entry in nats["container"]["env"].values()}
    assert keys == ROLE_KEYS
    names = {entry["valueFrom"]["secretKeyRef"]["name"]["$tplYaml"] for entry in nats["container"]["env"].values()}
    assert names == {'{{ .Values.global.coworkNatsRolesSecret | default (printf "%s-cowork-nats-roles" .Release.Name) }}'}
    assert defaults["natsRoles"]["enabled"] is None, "on by default with the bundled NATS"

    docs = objects(VALUE_SETS["bundled-dependencies"])
    secret = one(docs, "Secret", ROLES_SECRET)
    assert set(secret["data"]) == ROLE_KEYS
    passwords = [base64.b64decode(value).decode() for value in secret["data"].values()]
    assert all(len(password) >= 32 for password in passwords), "generated passwords are long"
    assert len(set(passwords)) == 3, "each role has its own password"
    for name, user in (("coordinator", "coordinator"), ("worker", "worker")):
        env = env_of(container(one(docs, "Deployment", f"{FULLNAME}-{name}"), name))
        assert env["COWORK_NATS_USER"]["value"] == user
        assert env["COWORK_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": ROLES_SECRET, "key": f"{name}-password"}
    config = one(docs, "ConfigMap", FULLNAME)["data"]
    assert "COWORK_NATS_USER" not in config, "no user shared by both roles"

    # Your own Secret: nothing generated, the Deployments and the bundled server read yours.
    own = objects(merged(VALUE_SETS["bundled-dependencies"], {"global": {"coworkNatsRolesSecret": "my-roles"}}))
    assert not [doc for doc in own if doc["kind"] == "Secret" and doc["metadata"]["name"] == ROLES_SECRET]
    coordinator = container(one(own, "Deployment", f"{FULLNAME}-coordinator"), "coordinator")
    assert env_of(coordinator)["COWORK_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "my-roles"

    # An external NATS keeps the shared connection settings unless the roles are asked for.
    external = objects(EXTERNAL_ENDPOINTS)
    assert not [doc for doc in external if doc["kind"] == "Secret" and doc["metadata"]["name"] == ROLES_SECRET]
    assert "COWORK_NATS_USER" not in env_of(container(one(external, "Deployment", f"{FULLNAME}-worker"), "worker"))
    asked = objects(merged(EXTERNAL_ENDPOINTS, {"natsRoles": {"enabled": True, "workerUser": "fleet-worker"}}))
    one(asked, "Secret", ROLES_SECRET)
    worker_env = env_of(container(one(asked, "Deployment", f"{FULLNAME}-worker"), "worker"))
    assert worker_env["COWORK_NATS_USER"]["value"] == "fleet-worker"


def test_each_deployment_gets_only_its_role_s_nats_secret() -> None:
    for values in (
        VALUE_SETS["bundled-dependencies"],
        merged(EXTERNAL_ENDPOINTS, {"natsRoles": {"enabled": True}, "docker": {"mode": "dind"}}),
    ):
        docs = objects(values)
        for name in ("coordinator", "worker"):
            deployment = one(docs, "Deployment", f"{FULLNAME}-{name}")
            pod = deployment["spec"]["template"]["spec"]
            refs = [ref for main in pod.get("containers", []) + pod.get("initContainers", []) for ref in role_refs(main)]
            assert refs == [{"name": ROLES_SECRET, "key": f"{name}-password"}], f"{name}: {refs}"
            volumes = pod.get("volumes", [])
            assert not [v for v in volumes if v.get("secret", {}).get("secretName") == ROLES_SECRET], name


def network_policies(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "NetworkPolicy"}


def test_network_policies_render_valid_and_admit_only_what_the_fleet_needs() -> None:
    docs = objects(EXTERNAL_ENDPOINTS)
    policies = network_policies(docs)
    assert set(policies) == {f"{FULLNAME}-coordinator", f"{FULLNAME}-worker"}, "on by default; no NATS of ours to guard"
    for policy in policies.values():
        validate_manifest(policy)
    coordinator = one(docs, "Deployment", f"{FULLNAME}-coordinator")
    worker = one(docs, "Deployment", f"{FULLNAME}-worker")
    api = policies[f"{FULLNAME}-coordinator"]["spec"]
    assert api["podSelector"]["matchLabels"] == coordinator["spec"]["selector"]["matchLabels"]
    assert api["policyTypes"] == ["Ingress"]
    assert api["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}], "the API port only, from any source"
    closed = policies[f"{FULLNAME}-worker"]["spec"]
    assert closed["podSelector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
    assert closed["policyTypes"] == ["Ingress"] and closed["ingress"] == [], "workers accept nothing"

    # Configured sources of the API.
    source = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    limited = network_policies(objects(merged(EXTERNAL_ENDPOINTS, {"networkPolicy": {"coordinator": {"apiFrom": [source]}}})))
    api = limited[f"{FULLNAME}-coordinator"]
    validate_manifest(api)
    assert api["spec"]["ingress"][0]["from"] == [source]

    # The bundled NATS: clients only from the fleet's pods and the release's nats-box.
    bundled = network_policies(objects(VALUE_SETS["bundled-dependencies"]))
    nats = bundled[f"{FULLNAME}-nats"]
    validate_manifest(nats)
    assert nats["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "nats",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "nats",
    }
    rules = {rule["ports"][0]["port"]: rule["from"] for rule in nats["spec"]["ingress"]}
    assert set(rules) == {4222, 6222, 8222}
    client_sources = [peer["podSelector"]["matchLabels"] for peer in rules[4222]]
    assert {"app.kubernetes.io/name": "cowork-fleet"} in client_sources
    assert all("namespaceSelector" not in peer for peer in rules[4222]), "only pods of this namespace"
    assert [peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for peer in rules[6222]] == ["nats"]
    # A worker Job of the coordinator (--k8s-worker-jobs) carries the name label the rule admits.
    job = next(doc for doc in yaml.safe_load_all(WORKER_JOB_FIXTURE.read_text()) if doc)
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "cowork-fleet"

    # The validator can fail on this shape too, and the policies can be turned off.
    broken = copy.deepcopy(nats)
    broken["spec"]["ingress"][0]["ports"][0]["port"] = {"number": 4222}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(broken)
    off = objects(merged(EXTERNAL_ENDPOINTS, {"networkPolicy": {"enabled": False}}))
    assert not network_policies(off)


def test_an_external_nats_leaves_replicas_to_the_fleet_unless_pinned() -> None:
    config = one(objects(EXTERNAL_ENDPOINTS), "ConfigMap", FULLNAME)["data"]
    assert "COWORK_NATS_REPLICAS" not in config, "found from the server at start"
    pinned = merged(EXTERNAL_ENDPOINTS, {"fleet": {"natsReplicas": 5}})
    assert one(objects(pinned), "ConfigMap", FULLNAME)["data"]["COWORK_NATS_REPLICAS"] == "5"


def test_worker_grace_period_covers_the_longest_job_and_the_drain() -> None:
    values = merged(EXTERNAL_ENDPOINTS, {"worker": {"drain": {"longestJobSeconds": 5400, "drainMarginSeconds": 600}}})
    worker = one(objects(values), "Deployment", f"{FULLNAME}-worker")
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 6000
    assert "6000s" in notes(values)


def test_coordinator_and_workers_share_one_config_map() -> None:
    docs = objects(VALUE_SETS["existing-secrets"])
    config = one(docs, "ConfigMap", FULLNAME)
    for name in (f"{FULLNAME}-coordinator", f"{FULLNAME}-worker"):
        deployment = one(docs, "Deployment", name)
        main = deployment["spec"]["template"]["spec"]["containers"][0]
        assert {"configMapRef": {"name": FULLNAME}} in main["envFrom"], name
    assert config["data"]["COWORK_TIER_CAPS"] == "container=200,replay=50"
    assert config["data"]["COWORK_ACK_WAIT"] == "60s"
    service = one(docs, "Service", f"{FULLNAME}-coordinator")
    coordinator = one(docs, "Deployment", f"{FULLNAME}-coordinator")
    assert service["spec"]["selector"] == coordinator["spec"]["selector"]["matchLabels"]


def test_two_coordinators_run_under_a_disruption_budget_each_advertising_its_pod() -> None:
    docs = objects(EXTERNAL_ENDPOINTS)
    coordinator = one(docs, "Deployment", f"{FULLNAME}-coordinator")
    spec = coordinator["spec"]
    assert spec["replicas"] == 2
    # Never both down by the chart's own doing: one replaced at a time, none added.
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    budget = one(docs, "PodDisruptionBudget", f"{FULLNAME}-coordinator")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    env = {item["name"]: item for item in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["COWORK_ADVERTISE_URL"]["value"] == "http://$(POD_IP):8700"
    # Kubernetes expands $(POD_IP) only from a variable defined before it.
    names = [item["name"] for item in spec["template"]["spec"]["containers"][0]["env"]]
    assert names.index("POD_IP") < names.index("COWORK_ADVERTISE_URL")


def cli_settings() -> tuple[set[str], set[str]]:
    """The COWORK_* variables and --flags that `cowork` declares or reads, from its source."""
    sources = sorted((REPO_ROOT / "cli" / "src" / "args").glob("*.rs"))
    sources += [REPO_ROOT / "cli" / "src" / "fleet_args.rs"]
    sources += sorted((REPO_ROOT / "cli" / "src" / "commands").glob("*.rs"))
    text = "\n".join(path.read_text() for path in sources if path.exists())
    variables = set(re.findall(r"\bCOWORK_[A-Z0-9_]+\b", text))
    flags = {"--" + field.replace("_", "-") for field in re.findall(r"pub ([a-z0-9_]+):", text)}
    return variables, flags


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_chart_sets_only_settings_the_cli_has(value_set: str) -> None:
    variables, flags = cli_settings()
    assert "COWORK_NATS_URL" in variables and "--listen" in flags, "cli source not found"
    # Read by the harness itself, not by cowork (passed through by the worker's allow-list).
    harness_variables = {"COWORK_AGENT_IMAGE", "COWORK_AGENT_BINARY", "COWORK_HARNESS_GITSET"}
    docs = objects(VALUE_SETS[value_set])
    used: set[str] = set()
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            used |= set(doc["data"])
        if doc["kind"] == "Deployment":
            for main in doc["spec"]["template"]["spec"]["containers"]:
                used |= {name for name in env_of(main) if name.startswith("COWORK_")}
                for arg in main.get("args", []):
                    if arg.startswith("--"):
                        assert arg in flags, f"{kn(doc)}: unknown flag {arg}"
    unknown = used - variables - harness_variables
    assert not unknown, f"variables cowork does not read: {sorted(unknown)}"


def test_optional_dependencies_are_declared_with_conditions() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    conditions = {dep["name"]: dep.get("condition") for dep in chart["dependencies"]}
    assert conditions == {"nats": "nats.enabled", "minio": "minio.enabled"}
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert defaults["nats"]["enabled"] is False and defaults["minio"]["enabled"] is False


def test_helm_lint_finds_no_errors() -> None:
    report = helm.lint(CHART_DIR, EXTERNAL_ENDPOINTS, kube_version="v1.33.0")
    # Severity 3 is an error. The sub-charts are not vendored (no chart repository is reachable
    # offline): Helm reports that as a warning only.
    errors = [m for m in report["messages"] if m["severity"] >= 3]
    assert not errors and not report["errors"], report


def test_deploy_units_use_only_cli_flags_and_drain_long_enough() -> None:
    """examples/deploy: the systemd unit and the launchd agent start `cowork worker` correctly."""
    _, flags = cli_settings()
    unit = (REPO_ROOT / "examples" / "deploy" / "cowork-worker.service").read_text()
    exec_start = re.search(r"^ExecStart=((?:.*\\\n)*.*)$", unit, re.MULTILINE)
    assert exec_start, "ExecStart not found"
    unit_argv = shlex.split(exec_start.group(1).replace("\\\n", " "))
    assert unit_argv[:2] == ["/usr/local/bin/cowork", "worker"], unit_argv
    assert re.search(r"^KillSignal=SIGTERM$", unit, re.MULTILINE)
    assert int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.MULTILINE).group(1)) >= 3600

    with (REPO_ROOT / "examples" / "deploy" / "com.cowork.worker.plist").open("rb") as file:
        agent = plistlib.load(file)
    assert agent["Label"] == "com.cowork.worker"
    assert agent["ExitTimeOut"] >= 3600, "launchd's default 20 s would kill running jobs"
    command = agent["ProgramArguments"][-1]
    agent_argv = shlex.split(command.split("exec ", 1)[1])
    assert agent_argv[1] == "worker", agent_argv
    assert agent_argv[agent_argv.index("--tiers") + 1] == "microvm"
    assert agent_argv[agent_argv.index("--executor") + 1] == "harness"
    for argv in (unit_argv, agent_argv):
        unknown = [arg for arg in argv if arg.startswith("--") and arg not in flags]
        assert not unknown, f"unknown flags {unknown} in {argv}"


# The Kubernetes Job of workers that `cowork coordinator --k8s-worker-jobs` creates for a large
# batch. `cargo test -p cowork-coordinator k8s` writes the manifests the Rust
# code builds to this file and fails when it was stale, so the file is what the code creates.
WORKER_JOB_FIXTURE = REPO_ROOT / "coordinator" / "tests" / "fixtures" / "k8s" / "worker-job.yaml"


def test_coordinator_worker_job_manifests_are_valid() -> None:
    docs = [doc for doc in yaml.safe_load_all(WORKER_JOB_FIXTURE.read_text()) if doc is not None]
    assert len(docs) >= 2, f"{WORKER_JOB_FIXTURE} holds {len(docs)} manifests"
    for doc in docs:
        assert doc["kind"] == "Job", kn(doc)
        try:
            validate_manifest(doc)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as error:
            pytest.fail(f"{kn(doc)} is invalid: {error}")
        pod = doc["spec"]["template"]["spec"]
        assert "--exit-when-idle" in container(doc, "worker")["args"], kn(doc)
        assert pod["restartPolicy"] in ("Never", "OnFailure"), kn(doc)
        assert doc["metadata"]["labels"]["cowork.fleet/batch"], kn(doc)
    # The validator must be able to fail on this shape too.
    broken = copy.deepcopy(docs[0])
    broken["spec"]["parallelism"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(broken)
