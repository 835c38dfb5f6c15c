"""`report.html` of `plan solve --out`: one self-contained page (inline data, CSS and JS; no network).

Built from the front's JSON (`planner.plan_output.result_dict`, read as a dict so added keys pass through)
and a few cluster facts. The page draws the front (hover: layout and figures; aggregated and
disaggregated points marked apart), a table of every point, and for the selected point the cluster
(scale-up domains, nodes, GPUs coloured by pool, shaded by pipeline stage, labelled with their expert
bank) and the KV tiers of session workloads. The drawing code is `report_assets/report.js`.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from costmodel.expected_error import describe
from costmodel.resolve import ResolvedScenario

ASSETS = Path(__file__).parent / "report_assets"


def page_data(data: dict[str, Any], resolved: ResolvedScenario) -> dict[str, Any]:
    """What the page needs: the front and expert banks as in the JSON, plus the cluster's shape and SLO."""
    system, slo = resolved.system, resolved.scenario.slo
    return {
        "scenario": data.get("scenario", resolved.scenario.name),
        "cluster": {"system": system.name, "gpus": resolved.gpus, "gpus_per_node": system.gpus_per_node,
                    "gpus_per_rack": system.gpus_per_rack, "scaleup_domain_gpus": system.scaleup_domain_gpus},
        "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "front": data["front"],
        "expert_banks": data.get("expert_banks", {}),
    }


def _script_json(value: Any) -> str:
    """JSON safe inside <script>: no `</` can close the element early."""
    return json.dumps(value, allow_nan=False).replace("</", "<\\/")


def render(data: dict[str, Any], resolved: ResolvedScenario) -> str:
    info = page_data(data, resolved)
    cluster = info["cluster"]
    title = html.escape(f"{info['scenario']}: Pareto front ({cluster['gpus']} x {cluster['system']})")
    slo = ", ".join(f"{k.removesuffix('_ms').upper()} SLO {v:g} ms" for k, v in info["slo"].items() if v is not None)
    css = (ASSETS / "report.css").read_text(encoding="utf-8")
    js = (ASSETS / "report.js").read_text(encoding="utf-8")
    error = data.get("expected_error")
    trust = f'<p class="trust">{html.escape(describe(error))}</p>\n' if error else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<script>window.reportErrors = [];
window.addEventListener("error", (e) => window.reportErrors.push(String(e.message)));
</script>
<style>{css}</style></head>
<body>
<h1>{title}</h1>
<p class="key"><span>{html.escape(slo or "no SLO")}</span><span>&#9679; aggregated</span>
<span>&#9632; disaggregated</span><span>hover a point for its layout and figures; click it to draw it</span></p>
{trust}<div id="front"></div>
<h2>Selected point</h2>
<div id="detail"></div>
<div id="cluster"></div>
<div id="tiers"></div>
<h2>Every point</h2>
<div id="table"></div>
<div id="tooltip"></div>
<script type="application/json" id="plan-data">{_script_json(info)}</script>
<script>{js}</script>
</body></html>
"""
