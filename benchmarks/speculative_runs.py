"""Which calibration rows ran speculative decoding, which the CSV has no column for.

ASSUMPTION (evidence below): TRT-LLM rows of DeepSeek-R1 from the 2026-03-25 and 2026-04-06 benchmark
campaigns (ids `2026_03_25_...`, `2026_04_06_...`) on builds 1.1.0rc2.post2 and 1.2.0rc6.post3 ran
DeepSeek's MTP module as a one-token drafter.

Evidence: 18 of these rows have a counterpart elsewhere in the CSV with the same layout, concurrency and
lengths, at the same build (the `dsr1_..._cfgN` sweep) or at the neighbouring build 1.2.0rc6.post2; the other
46 are tagged by their build and campaign alone. Against their counterparts the rows show the signature of
speculative decoding and of nothing else an engine switches: TPOT 1.2-1.8x lower (H200 tp8 x ep8, c8,
8192/1024: 12.5 ms against 18.6; B200 fp8 tp8 x ep8, c16, 1024/8192: 9.9 against 17.5; B200 fp8 attention DP
8, c256, 1024/8192: 18.2 against 33.4), with TTFT 0.95-1.5x (1.8-2.7x under attention DP). The smallest gains
(1.20-1.25x) are all at 8192/1024, where prompt chunks and attention take more of each step. Without this
assumption the model over-predicts these 64 rows' TPOT (median log error +0.19 on 1.1.0rc2.post2, +0.35 on
1.2.0rc6.post3), while the sweep's rows (model_path DeepSeek-V3, the same architecture) at 1.1.0rc2.post2 and
at 1.2.0rc6.post2 sat at -0.27 and -0.16, the fit bending TRT-LLM's factors between the two; with it both the
fit and the held-out figures improve (docs/calibration-log.md, session 15), and those four groups sit at -0.14,
-0.02, -0.23 and -0.08.

Draft depth and acceptance: DeepSeek-V3/R1 ship one MTP module (`num_nextn_predict_layers: 1`), and the
DeepSeek-V3 technical report (arXiv 2412.19437, section 5.4.3) measures the second token's acceptance at
85-90%; we take one draft token accepted with probability 0.85, the low end, as the benchmarks' synthetic
prompts are no easier to draft for than the report's. The rows cannot tell depth from acceptance: priced
with the calibration fitted before this assumption, one draft token at 0.8 or 0.9 gives in-sample TPOT 9.6%
and 9.8%, three at 0.6 (2.2 tokens per step against 1.85) 9.8%; refitted, one at 0.75 or 0.9 gives 9.3% and
9.5% (9.4% at 0.85).
"""

from __future__ import annotations

from typing import Any, Final

_CAMPAIGNS: Final = ("2026_03_25_", "2026_04_06_")
_MTP_BUILDS: Final = frozenset({"1.1.0rc2.post2", "1.2.0rc6.post3"})
_MTP_MODELS: Final = frozenset({"deepseek-ai/DeepSeek-R1"})
_MTP_DRAFT_TOKENS: Final = 1
_MTP_ACCEPTANCE: Final = 0.85


def speculative_setting(*, row_id: str, engine: str, version: str, model: str) -> dict[str, Any] | None:
    """The `workload.speculative` a row ran with, when it is not the default (none)."""
    if (engine == "trtllm" and model in _MTP_MODELS and version in _MTP_BUILDS
            and row_id.startswith(_CAMPAIGNS)):
        return {"method": "mtp", "draft_tokens": _MTP_DRAFT_TOKENS, "acceptance_rate": _MTP_ACCEPTANCE}
    return None
