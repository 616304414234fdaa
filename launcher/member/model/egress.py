"""A model member's endpoint on the runtime's side: what its egress is built from.

The member runtime, not the agent process, reads the endpoint's key (the variable
``inference.api_key_env`` names, from the runtime's own environment) and keeps the counts
of ``limits.tokens``, ``inference.budget.tokens`` and ``inference.max_turns``
(``gateway.proxy.inference``: the key attached, the counts kept, at the forward proxy).
In order: :func:`egress_factory`, which says whether a member has such an endpoint and
returns what builds its egress when the proxy is built; then the ``limit_reached``
record the egress writes when the member's tokens are spent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gateway.trace.bus import TraceBus
from launcher.admission.manifest import Manifest
from launcher.admission.model_agent import expand, url_problem

if TYPE_CHECKING:       # httpx with it: imported when the proxy is built
    from gateway.proxy.inference import InferenceEgress

__all__ = ["egress_factory"]


def egress_factory(manifest: Manifest, environ: Mapping[str, str], *, trace: TraceBus,
                   member_tokens: int | None) -> Callable[[], InferenceEgress] | None:
    """What builds the egress of a model member's endpoint; None for another member, or
    when ``base_url`` does not read as a URL (the driver then fails each task with
    ``E-RUN-065`` before any request)."""
    inference = manifest.inference
    if manifest.agent.model is None or inference.base_url is None:
        return None
    base_url = expand(inference.base_url, environ)
    if base_url is None or url_problem(base_url) is not None:
        return None
    variable = inference.api_key_env
    key = None if variable is None else environ.get(variable, "").strip()

    def build() -> InferenceEgress:
        from gateway.proxy.inference import InferenceBounds, InferenceEgress

        return InferenceEgress(
            base_url, key=key, variable=variable, header=inference.api_key_header,
            bounds=InferenceBounds(member_tokens=member_tokens,
                                   task_tokens=inference.budget.tokens,
                                   task_requests=inference.max_turns),
            on_limit=_limit_record(trace))

    return build


def _limit_record(trace: TraceBus) -> Callable[[str | None, str, int, int], None]:
    def record(task_id: str | None, limit: str, value: int, spent: int) -> None:
        trace.emit("limit_reached", task_id=task_id, limit=limit, value=value, spent=spent,
                   error="limit_reached")

    return record
