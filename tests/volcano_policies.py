"""Volcano's lifecycle policies as its job controller applies them, for tests of the manifests in
examples/volcano without a cluster.

What it reproduces, from volcano-sh/volcano (Apache-2.0; read, not copied):
- `action()`: `applyPolicies` in pkg/controllers/job/job_controller_util.go. The task's own
  policies first, then the Job's; in each list the first policy that matches wins; inside one
  policy its events are looked at before its exit code. An event matches when the policy names
  it or `*` (a PodPending needs a policy with a timeout). Nothing matching: SyncJob, which
  changes nothing.
- The event of a pod: pkg/controllers/job/job_controller_handler.go. A pod that enters phase
  Failed raises PodFailed with its first container's exit code; an evicted pod raises
  PodEvicted (with exit code 0, as every event but PodFailed).
- `check_policies()`: `validatePolicies` in pkg/webhooks/admission/jobs/validate/util.go, what
  Volcano's admission webhook refuses: a policy with both events and an exit code, or with
  neither; exit code 0; an event or exit code named twice; `*` beside other events; an event or
  action users may not name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

POD_FAILED = "PodFailed"
POD_EVICTED = "PodEvicted"
POD_PENDING = "PodPending"
ANY_EVENT = "*"
SYNC_JOB = "SyncJob"  # applyPolicies' default: no policy matched
# The events and actions the webhook lets a Job name (policyEventMap, policyActionMap).
USER_EVENTS = frozenset(
    {ANY_EVENT, POD_FAILED, POD_EVICTED, POD_PENDING, "Unknown", "TaskCompleted", "TaskFailed",
     "JobUpdated"}
)  # fmt: skip
USER_ACTIONS = frozenset(
    {"AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition", "TerminateJob",
     "CompleteJob", "ResumeJob"}
)  # fmt: skip


def _events(policy: Mapping[str, Any]) -> list[str]:
    """getEventlist: `events` and `event` together."""
    events = [str(e) for e in policy.get("events") or []]
    if policy.get("event"):
        events.append(str(policy["event"]))
    return events


def _match(policies: Sequence[Mapping[str, Any]], event: str, exit_code: int) -> str | None:
    for policy in policies:
        events = _events(policy)
        matches = bool(events and event) and (event in events or ANY_EVENT in events)
        # A PodPending policy only acts with a timeout (shouldConfigureTimeout).
        if matches and (event != POD_PENDING or policy.get("timeout") is not None):
            return str(policy["action"])
        # Exit code 0 is refused by the webhook, so it never matches a real failure.
        code = policy.get("exitCode")
        if code is not None and int(code) == exit_code:
            return str(policy["action"])
    return None


def action(job: Mapping[str, Any], task: str, event: str, exit_code: int = 0) -> str:
    """What Volcano does when a pod of `task` raises `event` (`exit_code`: a PodFailed's)."""
    for spec in job["spec"]["tasks"]:
        if spec["name"] == task:
            found = _match(spec.get("policies") or [], event, exit_code)
            if found is not None:
                return found
            break
    return _match(job["spec"].get("policies") or [], event, exit_code) or SYNC_JOB


def failed(job: Mapping[str, Any], task: str, exit_code: int) -> str:
    """The action for a pod of `task` whose container ended with `exit_code` (non-zero)."""
    return action(job, task, POD_FAILED, exit_code)


def check_policies(policies: Sequence[Mapping[str, Any]]) -> None:
    """ValueError naming what Volcano's admission webhook would refuse in one policy list."""
    seen_events: set[str] = set()
    seen_codes: set[int] = set()
    for policy in policies:
        events = list(dict.fromkeys(_events(policy)))
        code = policy.get("exitCode")
        if events and code is not None:
            raise ValueError(f"{policy}: must not specify event and exitCode simultaneously")
        if not events and code is None:
            raise ValueError(f"{policy}: either event or exitCode should be specified")
        if code is not None:
            if int(code) == 0:
                raise ValueError(f"{policy}: 0 is not a valid error code")
            if int(code) in seen_codes:
                raise ValueError(f"duplicate exitCode {code}")
            seen_codes.add(int(code))
            continue
        for event in events:
            if event not in USER_EVENTS:
                raise ValueError(f"{policy}: invalid policy event {event}")
            if policy.get("action") not in USER_ACTIONS:
                raise ValueError(f"{policy}: invalid policy action {policy.get('action')}")
            if event in seen_events:
                raise ValueError(f"duplicate event {event} across different policy")
            seen_events.add(event)
    if ANY_EVENT in seen_events and len(seen_events) > 1:
        raise ValueError("if there's * here, no other policy should be here")
