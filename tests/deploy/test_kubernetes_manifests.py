"""deploy/kubernetes/: every manifest is valid against the Kubernetes API's own schemas
(``kubernetes-validate``, offline, strict: no field the API does not know), and keeps
the rules docs/kubernetes.md states: credentials from Secrets, probes on /healthz,
resource requests, a non-root user without privileges, the image's `mur` arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate (a test extra) is not installed")

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
#: The oldest Kubernetes release these manifests promise to work on.
KUBERNETES = "1.30"


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in MANIFESTS:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((f"{path.name}:{document['kind']}", document))
    return found


DOCUMENTS = documents()


def pod_spec(document: dict[str, Any]) -> dict[str, Any] | None:
    if document["kind"] in ("Deployment", "Job"):
        spec: dict[str, Any] = document["spec"]["template"]["spec"]
        return spec
    return None


def test_there_is_a_job_a_serving_formation_a_gateway_and_their_services() -> None:
    kinds = sorted(name for name, _ in DOCUMENTS)
    assert kinds == sorted([
        "formation-deployment.yaml:Deployment", "formation-deployment.yaml:Service",
        "formation-job.yaml:Job", "gateway-deployment.yaml:Deployment",
        "gateway-deployment.yaml:Service", "secret.example.yaml:Secret",
        "secret.example.yaml:Secret"])


@pytest.mark.parametrize(("name", "document"), DOCUMENTS, ids=[n for n, _ in DOCUMENTS])
def test_each_manifest_is_valid_against_the_kubernetes_schemas(
        name: str, document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES, strict=True)


def test_a_manifest_with_an_unknown_field_is_refused() -> None:
    """The check can fail: strict validation refuses what the API does not know."""
    _, job = next(item for item in DOCUMENTS if item[1]["kind"] == "Job")
    broken = yaml.safe_load(yaml.safe_dump(job))
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullSecret"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


@pytest.mark.parametrize(("name", "document"),
                         [item for item in DOCUMENTS if pod_spec(item[1]) is not None],
                         ids=[n for n, d in DOCUMENTS if pod_spec(d) is not None])
def test_every_pod_runs_mur_unprivileged_with_requests_and_secrets(
        name: str, document: dict[str, Any]) -> None:
    spec = pod_spec(document)
    assert spec is not None
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["args"][0] == "run"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    requests = container["resources"]["requests"]
    assert {"cpu", "memory"} <= set(requests)
    for variable in container.get("env", []):
        # a credential never sits in a manifest: every *_TOKEN comes from a Secret
        if variable["name"].endswith("TOKEN"):
            assert "secretKeyRef" in variable["valueFrom"], variable
    if document["kind"] == "Deployment":
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/healthz"
        args = container["args"]
        flag = "--publish" if "--roster" in args else "--listen"
        assert args[args.index(flag) + 1] == "0.0.0.0:8080"
