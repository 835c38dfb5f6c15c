"""`report.html` of `plan solve --out` in a real headless browser (Debian's chromium).

The page is loaded from disk with networking off, its DOM dumped after the scripts ran, and read back:
it must render every point with no error, show each figure equal to the JSON, and draw the selected
point's GPUs and KV tiers. Skips (with the reason) where chromium is not installed; `.ci/run` installs it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.expected_error import describe
from planner import report_html
from planner.scenario import load_scenario
from tests.conftest import SCENARIOS
from tests.helpers import run_cli

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH: `apt-get install -y chromium` "
                                                        "to run the report's browser test")
FIGURE_KEYS = ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "gpus", "idle_gpus",
               "usd_per_million_tokens", "tokens_per_s_per_mw")  # report.js FIGURES, in their columns' order
SESSIONS_PLAN = Path(__file__).parents[1] / "export" / "plans" / "coding-agent-sessions-gb200-plan-6.yaml"


class Dom(HTMLParser):
    """Every element as (tag, attributes, text directly inside it)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self.open: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))
        if tag not in ("meta", "br", "img", "input", "link"):
            self.open.append(len(self.elements) - 1)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))

    def handle_endtag(self, tag: str) -> None:
        while self.open and self.elements[self.open[-1]][0] != tag:
            self.open.pop()
        if self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        if self.open:
            self.elements[self.open[-1]][2].append(data)

    def find(self, tag: str | None = None, **attrs: str) -> list[tuple[str, dict[str, str], str]]:
        return [(t, a, "".join(text)) for t, a, text in self.elements
                if (tag is None or t == tag) and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def having(self, attribute: str) -> list[tuple[str, dict[str, str], str]]:
        return [(t, a, "".join(text)) for t, a, text in self.elements if attribute in a]


def browse(page: Path, point: int) -> tuple[Dom, str]:
    """The DOM after the page's scripts ran, and the browser's log (console messages land there)."""
    assert BROWSER is not None
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run(
            [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom",
             f"{page.as_uri()}#point={point}"],
            capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    dom = Dom()
    dom.feed(run.stdout)
    return dom, run.stderr


def console_messages(log: str) -> list[str]:
    return [line for line in log.splitlines() if ":CONSOLE" in line]


def number(text: str) -> float:
    return float(text.replace("%", "").replace(",", ""))


def check_page(dom: Dom, log: str, data: dict[str, Any], point: int) -> None:
    front = data["front"]
    assert console_messages(log) == []
    body = dom.find("body")[0][1]
    assert body.get("data-rendered") == str(len(front)) and body.get("data-selected") == str(point)
    markers = [a for _, a, _ in dom.having("data-index") if "marker" in a.get("class", "")]
    assert [("disaggregated" in a["class"]) for a in markers] == [p["serving"] == "disaggregated" for p in front]
    for _, row, _ in dom.find("tr"):
        if "point" not in row.get("class", ""):
            continue
        entry = front[int(row["data-index"])]
        assert entry["serving"] in row["class"]
    cells = iter([(a, text) for _, a, text in dom.having("data-key") if a.get("data-value")])
    for entry in front:  # every figure of report.js's FIGURES the point has (a number), row by row
        for key in (k for k in FIGURE_KEYS if isinstance(entry.get(k), int | float)):
            attrs, text = next(cells)
            assert attrs["data-key"] == key
            value = entry[key]
            assert float(attrs["data-value"]) == value  # the exact figure, as the JSON has it
            digits = len(text.split(".")[1]) if "." in text else 0
            assert abs(number(text) - value) <= 0.5 * 10 ** -digits + 1e-9  # and shown rounded
    assert next(cells, None) is None
    placed = front[point]["placement"]["pools"]
    gpus = sum(len(pool["instances"]) * pool["gpus_per_instance"] for pool in placed)
    drawn = [a for _, a, _ in dom.find("rect") if "gpu used" in a.get("class", "")]
    assert body.get("data-drawn-gpus") == str(gpus) == str(len(drawn))
    roles = {pool["role"] for pool in front[point]["layout"]["pools"]}
    assert {a["class"].split()[-1] for a in drawn} == roles


def test_report_of_a_solved_front_renders_in_chromium(tmp_path: Path) -> None:
    result = run_cli("solve", str(SCENARIOS / "kimi-k2-gb200-nvl72.yaml"), "--time-limit", "20", "--out",
                     str(tmp_path), "--format", "json")
    assert result.code == 0, result.err
    data = json.loads((tmp_path / "front.json").read_text(encoding="utf-8"))
    page = tmp_path / "report.html"
    assert "http://" not in page.read_text(encoding="utf-8").replace("http://www.w3.org/2000/svg", "")
    assert describe(data["expected_error"]).replace("'", "&#x27;") in page.read_text(encoding="utf-8")
    servings = [p["serving"] for p in data["front"]]
    for point in {0, servings.index("disaggregated") if "disaggregated" in servings else 0}:
        dom, log = browse(page, point)
        check_page(dom, log, data, point)


def test_report_of_an_inventory_front_draws_each_group(tmp_path: Path) -> None:
    """H200 nodes and GB200 trays: a point whose pools run on both groups draws the GPUs of each."""
    result = run_cli("solve", str(SCENARIOS / "deepseek-v3-h200-gb200-inventory.yaml"), "--time-limit", "20",
                     "--out", str(tmp_path), "--format", "json")
    assert result.code == 0, result.err
    data = json.loads((tmp_path / "front.json").read_text(encoding="utf-8"))
    both = [i for i, p in enumerate(data["front"]) if {q["group"] for q in p["layout"]["pools"]} == {"hopper", "nvl"}]
    assert both
    for point in (both[0], len(data["front"]) - 1):
        dom, log = browse(tmp_path / "report.html", point)
        check_page(dom, log, data, point)


def test_report_draws_the_kv_tiers_of_a_sessions_plan(tmp_path: Path) -> None:
    """A one-point front built from a sessions plan file: the tier table shows its holdings and hit rates."""
    plan = yaml.safe_load(SESSIONS_PLAN.read_text(encoding="utf-8"))
    point = {**plan["figures"], "serving": plan["layout"]["serving"], "layout": plan["layout"],
             "placement": plan["placement"], "kv_tiers": plan["kv_tiers"], "midfill": plan.get("midfill")}
    data = {"scenario": plan["scenario"]["name"], "front": [point], "expert_banks": plan["expert_banks"]}
    page = tmp_path / "report.html"
    page.write_text(report_html.render(data, load_scenario(SCENARIOS / "coding-agent-sessions-gb200.yaml")),
                    encoding="utf-8")
    dom, log = browse(page, 0)
    check_page(dom, log, data, 0)
    rows = {a["data-tier"]: a for _, a, _ in dom.having("data-tier")}
    assert set(rows) == set(plan["kv_tiers"]["hit_rates"])
    held = [(a, text) for _, a, text in dom.find("td") if a.get("class") == "num" and a.get("data-value")]
    shown = {float(a["data-value"]) for a, _ in held}
    assert set(plan["kv_tiers"]["hit_rates"].values()) <= shown
    assert set(plan["kv_tiers"]["stored_gb"].values()) <= shown
