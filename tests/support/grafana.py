"""Grafana's side of a board, for tests that run its queries through a real Prometheus:
how a template variable is written into a query, and NVIDIA's board from dcgm-exporter
(``dcgm_exporter_board.json``: its variables and panel queries), which must fill from
``/metrics`` under the classic names."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.prometheus import api

NVIDIA_BOARD = json.loads((Path(__file__).parent / "dcgm_exporter_board.json").read_text())


def grafana_regex(values: list[str]) -> str:
    """A multi-value variable set to "All", as Grafana writes it into a Prometheus query."""
    escaped = [re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(expr: str, variables: dict[str, str]) -> str:
    """``expr`` with each ``$name`` and ``${name}`` replaced, as Grafana does (longest
    names first, so that ``$gpu`` never eats ``$gpus``)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", variables[name]).replace("$" + name,
                                                                         variables[name])
    return expr


def nvidia_board_series(base: str, instance: str) -> dict[str, list[dict[str, str]]]:
    """Each panel's series of NVIDIA's board with its variables: ``instance`` chosen, every
    GPU."""
    variables: dict[str, str] = {}
    for variable in NVIDIA_BOARD["templating"]:
        metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)",
                                     variable["query"]).groups()  # type: ignore[union-attr]
        values = api(base, f"label/{label}/values", **{"match[]": metric})
        variables[variable["name"]] = grafana_regex([instance] if label == "instance"
                                                    else values)
    return {panel["title"]: [s["metric"] for s in api(
        base, "query", query=substitute(panel["expr"], variables))["result"]]
        for panel in NVIDIA_BOARD["panels"]}


def check_nvidia_board(base: str, instance: str, gpus: int) -> None:
    """Every panel of NVIDIA's board fills: one series per GPU, one in all for its sum and
    average panels."""
    for title, series in nvidia_board_series(base, instance).items():
        aggregate = re.match(r"\s*(sum|avg)\(", next(
            p["expr"] for p in NVIDIA_BOARD["panels"] if p["title"] == title))
        if aggregate:
            assert len(series) == 1, (title, series)
            continue
        keys = [(s["hostname"], s["UUID"]) for s in series]
        assert len(keys) == gpus and len(set(keys)) == gpus, (title, instance, series)
