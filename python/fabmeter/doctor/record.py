"""The cheap checks of every experiment run: the findings for what run.json records (the config and both ends'
environment, with the engines' start line), recorded as run.json's `findings` once the run ended."""

from __future__ import annotations

from fabmeter.doctor import checks
from fabmeter.doctor.facts import Plan


def plan_of(doc: dict) -> Plan:
    """The run.json's measurement as a plan: its transport, largest size, CPUs, queue depths, other end and ofi
    provider."""
    config = doc.get("config") or {}
    params = config.get("params") or {}
    cpus = config.get("cpus")
    return Plan(str(params.get("transport")), int(params.get("max_size" if params.get("all") else "size") or 1),
                tuple(cpus) if isinstance(cpus, list) else None, int(params.get("rq_depth") or 1),
                int(params.get("sq_depth") or 1), config.get("server"), str(params.get("poll")),
                params.get("provider") if isinstance(params.get("provider"), str) else None)


def findings(doc: dict) -> list[dict]:
    return [f.as_json() for f in checks.findings(plan_of(doc), doc.get("environment") or {})]
