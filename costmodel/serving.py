"""Steady-state serving metrics of a layout, closed-loop at the layout's batch.

Aggregated serving (one pool, continuous batching). Per attention-DP rank, a round serves its `b`
sequences once: their prefills (b x input tokens) ride on decode steps in chunks of up to
`ENGINE_STEP_TOKENS` tokens per step (mixed steps, each weight read once for both); the remaining steps
are decode-only. In the closed loop a request's end-to-end time is the round, so TPOT is (round - TTFT)
/ (osl - 1), as benchmarks measure it: prefill time a request waits for before its first token counts in
its TTFT, the rest in its TPOT (work conservation, whatever the arrival pattern). TTFT depends on how
bunched arrivals are: a request waits for the mixed steps that carry its own prompt (each priced with its
own chunk alone beside the decode batch: arrivals spread over the round put about one prompt in a step)
plus, with the engine's fitted `cohort_fraction` k, for half of the other requests' prefill backlog at full
chunks (k = 0: fully staggered arrivals; k = 1: one cohort, as when a closed-loop benchmark starts all
requests together and equal lengths keep them in step), after waiting out the decode step under way when
it arrives (the engine scheduled that step during the one before, without it; its slot idles for that step,
so the wait is in the round as well). Every request's first token also waits the
engine's fitted `prefill_layer_latency_s` per layer: a latency the kernel terms do not explain (measured
TTFT floors at low load are 25-365 ms where the kernels take 20-60 ms: context-phase launches outside CUDA
graphs, per-request setup, host synchronisations, the first token's trip through the server), paid once
per request and overlapped with other sequences' steps, so it lengthens TTFT but not the round (TPOT,
(round - TTFT) / (osl - 1), then leaves it out of the decode share; a form with the latency inside every
prefill-carrying step, in the round, fitted the calibration rows worse: docs/calibration-log.md, session 9).
A prefill pool's fill pays it as well. An engine that balances context requests across attention-DP ranks
(TRT-LLM: `costmodel.calibration.HOLDS_PROMPTS_UNDER_DP`) holds a prompt back for its fitted `dp_wait_steps`
decode steps in a mixed pool with attention DP; the request and its slot wait, so TTFT and the round grow
alike (`PoolTiming.dp_wait_s`).

Prefill-first engines (SGLang by default: `costmodel.calibration.SCHEDULING`, `PoolContext.prefill_first`)
run waiting prompts as prefill batches of their own, up to `PoolContext.prefill_batch_tokens` per rank, while
every decode waits: the prompt steps carry no decode batch and add to the round's decode steps instead of
riding on them. A staggered request runs its own prompt alone; one of a cohort waits for the batches ahead
of it and its own, (batches + own steps) / 2 on average; the round holds one batch per chunk of the
cohort's prompts, or one prompt step per staggered request (the same k weighs the two).

Attention-DP ranks step together (the expert layer joins them every step: vLLM runs dummy passes on idle
ranks, SGLang syncs every MoE step across DP ranks, TRT-LLM's attention DP likewise), so a step lasts as long
as its busiest rank's prompt work, for every rank. A cohort's prompts start together; a staggered request's
prompt lands at a random step of its rank's round, independently of the other ranks' (`unaligned_ranks`: the
ranks holding requests), unless the engine aligns them (TRT-LLM's context balancing: `PoolContext.holds_prompts`,
at the cost of its hold). Such a prompt's step is its chunk alone beside the other ranks' decodes
(`PoolPlan.lone`; the aligned model's `own` step has every rank carrying one), in TTFT and in the round, and each
rank's round holds the steps other ranks' prompts stretch to one: prefill first, the exact expectation of
random placement (`stretched_slots`); piggyback, the busiest rank's own chunks slot by slot (`busiest_units`,
binomial counts up to the chunks a step's budget holds) where they outlast the round's aligned chunks. Both
grow with the batch (the batch search's bounds rest on that). Assumption: prompts spread evenly over a round's
steps; where prompt steps are far longer than decode steps, arrivals during one gather into the next and fewer
steps stretch. The step under way that an arrival waits out is kept at a decode step.

Disaggregated serving: prefill instances process `batch` requests per fill; decode instances hold
`batch` sequences each. Requests cycle between the prefill queue and the decode pool; the mean time at
the prefill pool is the asymptotic closed-network bound max(fill latency, N / capacity - time elsewhere)
(exact at light and at saturating load), or, for the cohort share of arrivals, the fill latency plus
half the others' prefills ahead (`closed_loop_wait_s`). KV moves from prefill to decode over NVLink
when a prefill and a decode instance fit in one scale-up domain together, over the NICs otherwise.

Pipelines: a fill chunk passes every stage (latency = sum of stage times, one chunk per slowest-stage
time); decode keeps pp micro-batches in flight, so a sequence gets a token every pp slowest-stage steps.
Speculative decoding verifies 1 + d tokens per step and accepts 1 + a + ... + a^d of them on average.

Length distributions (`Spread`, when input or output lengths vary): means replace the one length, and
three effects of the spread are priced (equal lengths reduce every one of them to the formulas above):
- composition: a request stays in the decode batch in proportion to its output length O, so the batch in
  service holds the length-biased outputs O_b (mean E[O^2]/E[O]): mean decode context cached + E[I] +
  E[O^2]/(2 E[O]), KV reserved for the whole context cached + E[I] + E[O^2]/E[O]; a prompt token drawn at
  random belongs to a prompt of E[I^2]/E[I] tokens, so causal fill attends to E[I^2]/(2 E[I]) keys;
- slowest attention-DP rank: ranks run every step together (the expert layer joins them), so a step lasts
  as long as the rank with the most KV to read, and a round of mixed steps as the rank with the most
  prompt tokens (engines align prefills across ranks, so the busiest rank's chunks set the count); each
  rank holds its own requests, so its total is a sum of independent lengths and the slowest of dp is
  about mean + sqrt(n var) E[max of dp normals] (`costmodel.lengths.slowest_of`). A prefill pool's ranks
  are not held back so: a rank whose prompt is done pulls the next waiting one (attention-DP balancers),
  so under load no rank idles and a fill takes the mean prompt tokens per rank. The spread
  counted is that of the lengths, Var(I) + Var(O_b)/3 for the decode context (the phase of each sequence,
  U O_b with U uniform, adds E[O_b]^2/12 even at equal lengths; the closed loop keeps that balanced, as
  the model assumes without a distribution);
- KV memory: the fullest rank must fit, the same slowest-of sum over the reserved contexts;
- TTFT: a request's own prefill takes E[max(1, I / chunk)] mixed steps.
Not modelled: correlation of input and output lengths (the benchmark tools draw them independently),
window caps applied per length (they apply to the mean), and the drain of a finite benchmark's last
requests.

Work is planned first (`plan_pool`, independent of calibration), then timed (`time_pool`) with a pricer,
so that calibration fitting can re-time planned work cheaply.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from costmodel.kv_tiers import FETCHED_TIERS, TierPlan, plan_tiers, turn_context
from costmodel.layout import Pool
from costmodel.lengths import Lengths, expected_max_binomial, slowest_of
from costmodel.memory import MemoryUse, largest_fitting, memory_use, seqs_per_rank
from costmodel.modes import CacheTier, PoolContext, decode_work, layer_work, merged_work, midfill_work
from costmodel.operators import StepShape
from costmodel.pricing import Pricer
from costmodel.scenario import Workload
from costmodel.work import StepTime, StepWork

# Largest number of new tokens one attention-DP rank puts in one step: TRT-LLM max_num_tokens 8192,
# vLLM max_num_batched_tokens 8192 (online default on large GPUs), SGLang chunked_prefill_size 8192.
ENGINE_STEP_TOKENS = 8192
# SGLang's default chunked_prefill_size, the tokens of one prefill batch (server_args.py,
# `_handle_gpu_memory_settings`, 0.5.8): 8192 on GPUs under 160 GiB (H100, H200), 16384 from 160 GiB
# (B200, MI300); under attention DP divided among the ranks (`_handle_data_parallelism`).
PREFILL_FIRST_TOKENS = {0: 8192, 160 * 2**30: 16384}


def sglang_chunked_prefill(hbm_capacity_bytes: float) -> int:
    """SGLang's default chunked_prefill_size on a GPU of this HBM (SGLang divides it among attention-DP ranks)."""
    return max(t for floor, t in PREFILL_FIRST_TOKENS.items() if hbm_capacity_bytes >= floor)


def prefill_batch(requested: int | None, hbm_capacity_bytes: float) -> float:
    """Prompt tokens per attention-DP rank in one prefill batch of a plan's prefill-first pool: the scenario's
    `prefill_batch_tokens`, else SGLang's default for the GPU per rank (what `plan export` launches, times DP)."""
    return float(requested if requested is not None else sglang_chunked_prefill(hbm_capacity_bytes))

# Which turns of multi-turn sessions a pool's requests are: all of them (one fill pool), or, with a
# separate midfill pool, the first turns (prefill pool) or the turns after a gap (midfill pool).
Turns = Literal["all", "first", "later"]


@dataclass(frozen=True)
class Spread:
    """How request lengths vary: the input lengths (before prefix hits) and output lengths, drawn
    independently, with `kept` the share of input tokens computed (1 - prefix hit rate) and `cached` the
    fixed earlier context. Derivations in the module docstring."""

    inputs: Lengths
    outputs: Lengths
    kept: float
    cached: float

    @functools.cached_property
    def biased_output(self) -> tuple[float, float]:
        """Mean and variance of the output length of a request found in the decode batch."""
        return self.outputs.length_biased()

    @property
    def fill_new(self) -> float:
        """New tokens of the prompt a prompt token belongs to, on average: kept E[I^2] / E[I]."""
        return self.kept * self.inputs.length_biased()[0]

    def new_tokens(self) -> tuple[float, float, float]:
        """Mean, variance and largest of a request's new tokens."""
        inputs = self.inputs
        return self.kept * inputs.mean, self.kept**2 * inputs.variance, self.kept * inputs.largest

    def decode_context(self) -> tuple[float, float, float]:
        """Mean, variance (of the lengths) and largest context of a sequence in the decode batch."""
        mean_o, var_o = self.biased_output
        largest = self.cached + self.inputs.largest + self.outputs.largest
        return self.cached + self.inputs.mean + mean_o / 2.0, self.inputs.variance + var_o / 3.0, largest

    def reserved(self, with_output: bool) -> tuple[float, float, float]:
        """Mean, variance and largest whole context (KV reserved) of a sequence in service: a decode batch
        holds length-biased outputs; a fill holds inputs as they come."""
        mean, var, largest = self.cached + self.inputs.mean, self.inputs.variance, self.cached + self.inputs.largest
        if not with_output:
            return mean, var, largest
        mean_o, var_o = self.biased_output
        return mean + mean_o, var + var_o, largest + self.outputs.largest

    def own_steps(self, chunk: float) -> float:
        """Chunks a request's own prefill takes on average: E[max(1, new / chunk)]."""
        return (self.kept * self.inputs.mean + self.kept * self.inputs.shortfall(chunk / self.kept)) / chunk


@dataclass(frozen=True)
class RequestShape:
    """Token counts of one request as the engine sees them (means, with `spread` when lengths vary)."""

    new: float  # input tokens not found in any cache (computed in the fill)
    cached: float  # context already held as KV (earlier turns and prefix-cache hits)
    output: float  # generated tokens (a whole number unless lengths vary)
    draft: int  # speculative tokens verified per decode step
    accepted: float  # tokens accepted per decode step

    fetch: tuple[tuple[CacheTier, float], ...] = ()  # cached tokens fetched from slower tiers, per tier
    tiers: TierPlan | None = None  # multi-turn sessions: where contexts wait between turns
    spread: Spread | None = None  # varying lengths (None: every request has these)

    @staticmethod
    def of(workload: Workload, tiers: TierPlan | None = None, turns: Turns = "all") -> RequestShape:
        """Per request (per turn, with sessions: the mean over `turns`). Sessions without `tiers`: the whole
        context, as if in HBM (what memory sizing needs); with `tiers`: recomputed contexts become new
        tokens, fetched ones are fetched from their tier."""
        spec = workload.speculative
        draft = spec.draft_tokens if spec.method != "none" else 0
        accepted = sum(spec.acceptance_rate**i for i in range(draft + 1))
        if workload.sessions is not None:
            return _session_turn(workload, tiers, turns, draft, accepted)
        tier = workload.cached_tier
        if workload.input_lengths is not None or workload.output_lengths is not None:
            inputs, outputs = workload.input_distribution, workload.output_distribution
            kept = 1.0 - workload.prefix_hit_rate
            spread = Spread(inputs, outputs, kept, float(workload.cached_tokens))
            cached = workload.cached_tokens + inputs.mean * workload.prefix_hit_rate
            return RequestShape(new=inputs.mean * kept, cached=cached, output=outputs.mean, draft=draft,
                                accepted=accepted, fetch=((tier, cached),) if tier != "hbm" and cached > 0 else (),
                                spread=spread)
        cached = workload.cached_tokens + workload.input_tokens * workload.prefix_hit_rate
        return RequestShape(
            new=workload.input_tokens * (1.0 - workload.prefix_hit_rate),
            cached=cached,
            output=workload.output_tokens,
            draft=draft,
            accepted=accepted,
            fetch=((tier, cached),) if tier != "hbm" and cached > 0 else (),
        )

    @property
    def mid_context(self) -> float:
        """Context at mid-generation, where a decode step's KV read is its average (lengths varying: the
        mean over the batch in service, `Spread.decode_context`)."""
        if self.spread is not None:
            return self.spread.decode_context()[0]
        return self.cached + self.new + self.output / 2.0

    @property
    def fill_new(self) -> float:
        """New tokens per sequence in a fill step's attention shape: the prompt a prompt token belongs to."""
        return self.new if self.spread is None else self.spread.fill_new

    def slowest_new(self, seqs: float, ranks: float) -> float:
        """New tokens of `seqs` requests on the attention-DP rank with the most of `ranks`."""
        if self.spread is None:
            return seqs * self.new
        mean, var, largest = self.spread.new_tokens()
        return slowest_of(_whole(ranks), seqs, mean, var, largest)

    def slowest_context(self, seqs: float, ranks: float) -> float:
        """Mean decode context per sequence on the rank with the most KV to read (of `ranks`, `seqs` each)."""
        if self.spread is None or seqs <= 0:
            return self.mid_context
        mean, var, largest = self.spread.decode_context()
        return slowest_of(_whole(ranks), seqs, mean, var, largest) / seqs

    def own_steps(self, chunk: float) -> float:
        """Mixed steps a request's own prefill takes, in chunks of `chunk` tokens."""
        if self.spread is None:
            return max(1.0, self.new / chunk)
        return self.spread.own_steps(chunk)


def _whole(ranks: float) -> int:
    """Ranks counted for the slowest-of: whole ranks (a pool with fewer sequences than ranks uses fewer)."""
    return max(1, int(ranks))


def _session_turn(workload: Workload, tiers: TierPlan | None, turns: Turns, draft: int,
                  accepted: float) -> RequestShape:
    """The mean turn of `turns`: a first turn holds only the system prompt (a shared prefix, in HBM); a
    later turn's context comes from the tiers, by their hit rates among later turns."""
    sessions = workload.sessions
    assert sessions is not None
    prompt = float(sessions.system_prompt_tokens)
    if turns == "first":
        return RequestShape(new=workload.input_tokens, cached=prompt, output=workload.output_tokens, draft=draft,
                            accepted=accepted)
    context = turn_context(sessions, workload.input_tokens, workload.output_tokens)
    first = 1.0 / sessions.turns if turns == "all" else 0.0
    later = 1.0 - 1.0 / sessions.turns  # share of all turns that follow a gap (tier shares count all turns)
    weight = (1.0 - first) / later if later > 0 else 0.0  # per turn of `turns`, for each later turn
    recompute = tiers.turn_shares["recompute"] * weight if tiers else 0.0
    fetch: tuple[tuple[CacheTier, float], ...] = ()
    if tiers is not None:
        fetch = tuple((tier, tiers.turn_shares[tier] * weight * context) for tier in FETCHED_TIERS
                      if tiers.turn_shares[tier] > 0)
    return RequestShape(new=workload.input_tokens + recompute * context,
                        cached=first * prompt + (1.0 - first - recompute) * context,
                        output=workload.output_tokens, draft=draft, accepted=accepted, fetch=fetch, tiers=tiers)


@dataclass(frozen=True)
class PoolPlan:
    """Everything a pool does, as work per pipeline stage; no calibration involved."""

    ctx: PoolContext
    pool: Pool
    request: RequestShape
    memory: MemoryUse
    largest_batch: Callable[[], int]  # the largest batch that fits, computed when first asked (`max_batch`)
    fill: list[StepWork] | None  # prefill pools: one fill of the pool's batch (per stage)
    decode: list[StepWork] | None  # decode and mixed pools: one decode-only step
    mixed: list[StepWork] | None  # mixed pools: one decode step carrying a prefill chunk
    fill_chunks: float  # fill steps per fill of the batch (prefill pools)
    mixed_steps: float  # mixed steps per round (mixed pools)
    own_steps: float  # mixed steps one request's own prefill needs
    turns: Turns = "all"
    admitted: int | None = None  # a mixed pool whose batch does not fit: the batch the engine admits (the rest wait)
    own: list[StepWork] | None = None  # mixed pools: a decode step carrying one request's own prefill chunk
    # mixed pools whose attention-DP ranks' prompts are not aligned (`unaligned_ranks`): the step of one rank's
    # own chunk while the other ranks decode (`own` has every rank in service carrying one)
    lone: list[StepWork] | None = None

    def works(self) -> list[StepWork]:
        """Every step work of the pool (each phase, each stage), to be priced."""
        own = None if self.own is self.mixed else self.own  # the same works when one prompt fills the step
        return [work for phase in (self.fill, self.decode, self.mixed, own, self.lone) for work in phase or []]

    @functools.cached_property
    def max_batch(self) -> int:
        """The largest batch of this layout that fits HBM (a search of several memory counts: only on demand)."""
        return self.largest_batch()

    @property
    def in_service(self) -> int:
        """Sequences in service per instance: the pool's batch, or what the engine admits of it."""
        return self.pool.batch if self.admitted is None else self.admitted


def pool_turns(pool: Pool, split_fills: bool) -> Turns:
    """The turns a pool serves: with a midfill pool, the prefill pool runs only sessions' first turns."""
    if pool.role == "midfill":
        return "later"
    return "first" if split_fills and pool.role == "prefill" else "all"


def plan_pool(ctx: PoolContext, pool: Pool, workload: Workload, tiers: TierPlan | None = None,
              turns: Turns = "all") -> PoolPlan:
    """A pool's work per stage, for requests that are `turns` of sessions; with sessions, `tiers` says
    where the fills find their contexts (None: all in HBM, the shape `with_session_tiers` sizes the
    tiers from)."""
    request = RequestShape.of(workload, None, turns)
    memory, largest = pool_memory(ctx, pool, workload, request)
    if tiers is not None:
        request = RequestShape.of(workload, tiers, turns)
    seqs = seqs_per_rank(pool.batch, ctx.par.dp)
    active = min(float(pool.batch), float(ctx.par.dp))  # attention-DP ranks holding requests
    fill = decode = mixed = None
    fill_chunks = mixed_steps = own_steps = 0.0
    new = request.fill_new  # tokens per sequence in fill shapes (the mean prompt unless lengths vary)
    if pool.role in ("prefill", "midfill"):
        total = max(seqs * request.new, 1.0)  # the mean per rank: a rank done early pulls the next prompt
        chunk = min(float(ENGINE_STEP_TOKENS), total)
        fill = _stages(ctx, lambda s: midfill_work(ctx, s, chunk / new, new, request.cached, request.fetch, active,
                                                   alone=True))
        fill_chunks = total / chunk
    context = request.slowest_context(seqs / ctx.par.pp, active)  # the rank with the most KV to read
    if pool.role in ("mixed", "decode"):
        decode = _stages(ctx, lambda s: _decode_stage(ctx, s, seqs / ctx.par.pp, request, context, active))
    if pool.role == "mixed":
        # prefill first: the engine's prefill batch; else what the decode tokens leave of the step's budget
        budget = (ctx.prefill_batch_tokens if ctx.prefill_batch_tokens is not None
                  else max(ENGINE_STEP_TOKENS - seqs * (1 + request.draft), ENGINE_STEP_TOKENS / 4))
        prompts = request.slowest_new(seqs, active)
        chunk = min(budget, prompts)
        decodes = decode or []  # each stage's decode step, planned above (merging leaves it as it is)

        def carrying(tokens: float, micro_batches: int, ranks: float = active) -> list[StepWork]:
            """Each stage's decode step (one micro-batch's) with `tokens` prompt tokens on each of `ranks`
            ranks spread over `micro_batches` of the pipeline's micro-batches riding on it (prefill first: the
            prompt tokens alone)."""
            per_seq = tokens / new / micro_batches

            def prompt(s: int) -> StepWork:
                return midfill_work(ctx, s, per_seq, new, request.cached, request.fetch, ranks,
                                    alone=ctx.prefill_first)
            return _stages(ctx, prompt if ctx.prefill_first else lambda s: merged_work(decodes[s], prompt(s)))

        mixed = carrying(chunk, ctx.par.pp)  # a round's prompt tokens: every micro-batch carries its share
        mixed_steps = prompts / chunk
        # A request's own prompt is chunked by the step's token budget alone (the round's chunk can be smaller:
        # fewer prompt tokens per rank than the budget), in steps of its own chunk (its mean prompt when
        # lengths vary): with equal lengths the same count as max(1, new / chunk) whenever a rank holds a
        # whole request.
        own_steps = request.own_steps(budget)
        own_chunk = min(budget, request.new)
        # One request's chunk rides in one micro-batch, whole: a pipeline splits a round's prompts among its
        # micro-batches, not one prompt's chunk (at pp 1 the round's step; long prompts fill it either way)
        own = mixed if own_chunk == chunk and ctx.par.pp == 1 else carrying(own_chunk, 1)
        lone = carrying(own_chunk, 1, 1.0) if unaligned_ranks(ctx, pool.batch) > 1 else None
        return PoolPlan(ctx, pool, request, memory, largest, fill, decode, mixed, fill_chunks, mixed_steps,
                        own_steps, turns, own=own, lone=lone)
    return PoolPlan(ctx, pool, request, memory, largest, fill, decode, mixed, fill_chunks, mixed_steps, own_steps,
                    turns)


def with_session_tiers(plan: PoolPlan, timing: PoolTiming, workload: Workload) -> PoolPlan:
    """Re-plan a fill pool (mixed, prefill or midfill) of a sessions workload with its idle contexts in tiers
    sized for `timing`'s turn rate, the pool's rate with every context in HBM (`costmodel.kv_tiers`)."""
    ctx, pool, sessions = plan.ctx, plan.pool, workload.sessions
    if sessions is None or pool.role == "decode" or plan.turns == "first":
        return plan  # first turns find only the system prompt, a shared prefix in HBM
    recompute = 2.0 * ctx.arch.active_params() / ctx.fmt.peak(ctx.fmt.expert_compute)  # roofline, per token
    # The tiers count rates in turns of every kind: a midfill pool's r later turns stand for r T / (T - 1);
    # a pool sized for part of its full rate (`tier_load`) holds that part's idle sessions.
    rate = pool.tier_load * turns_per_s_per_gpu(timing) / (later_share(workload) if plan.turns == "later" else 1.0)
    per_token = ctx.arch.bytes_per_context_token(turn_context(sessions, workload.input_tokens,
                                                              workload.output_tokens), ctx.fmt.kv_dtype)
    tiers = plan_tiers(sessions, workload.input_tokens, workload.output_tokens, per_token, ctx.system, rate,
                       plan.memory.capacity - plan.memory.total, recompute, pool.kv_store, ctx.offload_bytes)
    return plan_pool(ctx, pool, workload, tiers, plan.turns)


def later_share(workload: Workload) -> float:
    """Share of turns that follow a gap (all but each session's first); 1 without sessions."""
    return 1.0 if workload.sessions is None else 1.0 - 1.0 / workload.sessions.turns


def turn_share(workload: Workload, turns: Turns) -> float:
    """Share of requests that are `turns` (first turns: 1/T; the turns after a gap: 1 - 1/T)."""
    first = 0.0 if workload.sessions is None else 1.0 / workload.sessions.turns
    return {"all": 1.0, "first": first, "later": later_share(workload)}[turns]


def turns_per_s_per_gpu(timing: PoolTiming) -> float:
    """Requests (turns) per second per GPU a fill pool (mixed, prefill or midfill) serves at its batch."""
    return timing.requests_per_s / timing.plan.pool.gpus_per_instance


def _stages(ctx: PoolContext, build: Callable[[int], StepWork]) -> list[StepWork]:
    return [build(stage) for stage in range(len(ctx.stages))]


def _decode_stage(ctx: PoolContext, stage: int, seqs: float, request: RequestShape, context: float,
                  active: float | None = None) -> StepWork:
    """One decode step of `seqs` sequences of `context` tokens on average (the slowest rank's)."""
    work = decode_work(ctx, stage, seqs, context, 1.0 + request.draft, active)
    if request.draft and stage == len(ctx.stages) - 1 and ctx.arch.mtp_layer is not None:
        work = work.copy()  # the cached step is shared: drafting adds to a copy
        for _ in range(request.draft):  # sequential MTP drafting passes, one token each
            shape = StepShape("decode", seqs, 1.0, context, active)
            work.extend(layer_work(ctx, ctx.arch.mtp_layer, shape))
    return work


@dataclass(frozen=True)
class PhaseTime:
    """A priced phase: its slowest stage's step, the sum over stages, and the slowest stage's work."""

    slowest: StepTime
    sum_s: float
    work: StepWork

    @property
    def max_s(self) -> float:
        return self.slowest.total_s


def time_phase(works: list[StepWork], pricer: Pricer) -> PhaseTime:
    steps = [pricer.price(work) for work in works]
    totals = [step.total_s for step in steps]
    slowest = max(range(len(steps)), key=totals.__getitem__)
    return PhaseTime(steps[slowest], sum(totals), works[slowest])


@dataclass(frozen=True)
class PoolTiming:
    """A timed pool: its phases and, per request, TTFT, TPOT and the time per round or fill."""

    plan: PoolPlan
    fill: PhaseTime | None
    decode: PhaseTime | None
    mixed: PhaseTime | None
    ttft_s: float  # mixed: the whole TTFT; prefill: one fill of the batch (latency)
    tpot_s: float  # mixed and decode pools
    cycle_s: float  # mixed: one round of the batch; prefill: pipelined time per fill of the batch; decode: a step
    first_token_s: float = 0.0  # of ttft_s: the engine's first-token latency (layers x prefill_layer_latency_s)
    step_wait_s: float = 0.0  # of ttft_s (mixed pools): the decode step under way when the request arrives
    dp_wait_s: float = 0.0  # of ttft_s and cycle_s (mixed pools under attention DP): the prompt held back
    prompt_s: float = 0.0  # of cycle_s (mixed pools): the steps that carry prompts; the rest are decode-only

    @property
    def requests_per_s(self) -> float:
        """Mixed pools: requests completed per second per instance; fill pools: requests filled (capacity)."""
        return self.plan.in_service / self.cycle_s

    @property
    def prompts_outpace_decode(self) -> bool:
        """A mixed pool whose prompt chunks ride on decode steps (not prefill first) needs more prompt-carrying
        steps per round than a request has decode steps: past this point each further sequence's decode token
        takes prompt budget from every mixed step (`plan_pool`), and requests per second fall slowly as the batch
        grows (planner.batches bounds such batches without assuming they do not). Once true at a batch of a
        layout, true at every larger one (prompt steps grow faster than the batch; decode steps stay)."""
        plan = self.plan
        if self.mixed is None or plan.ctx.prefill_first:
            return False
        return plan.mixed_steps > plan.request.output / plan.request.accepted


def time_pool(plan: PoolPlan, pricer: Pricer) -> PoolTiming:
    pricer = pricer.on(plan.ctx.system)  # a pool of another inventory group, or wider than a rack
    pp, request = plan.ctx.par.pp, plan.request
    fill = time_phase(plan.fill, pricer) if plan.fill else None
    decode = time_phase(plan.decode, pricer) if plan.decode else None
    mixed = time_phase(plan.mixed, pricer) if plan.mixed else None
    engine = pricer.calibration.engine(pricer.engine)
    # per layer of the model (the pool's stages), not of a step's work: MTP drafting passes add layers to decode
    first_token = engine.prefill_layer_latency_s * sum(len(stage) for stage in plan.ctx.stages)
    if fill is not None:  # prefill pool
        latency = fill.sum_s + (plan.fill_chunks - 1.0) * fill.max_s + first_token
        return PoolTiming(plan, fill, None, None, latency, 0.0, plan.fill_chunks * fill.max_s,
                          first_token_s=first_token)
    assert decode is not None
    t_decode = pp * decode.max_s
    if mixed is None:  # decode pool
        return PoolTiming(plan, None, decode, None, 0.0, t_decode / request.accepted, t_decode)
    assert plan.own is not None  # `plan_pool` plans a mixed pool's own-prompt step beside its mixed step
    t_mix = pp * mixed.max_s
    # One request's own prompt: each chunk through every stage in turn, the next a stage behind it (chunks
    # pipelined, as a prefill pool's are), so a single chunk takes its whole work whatever the pipeline depth;
    # at pp 1, own steps x the step. (Until session 22 a chunk was spread over the pp micro-batches, and a
    # prompt's latency fell as 1 / pp: an 8K-token Llama-70B prefill at tp2 pp4 in 244 ms, where its FLOPs
    # at H100's fp8 peak take 292.)
    own = mixed if plan.own is plan.mixed else time_phase(plan.own, pricer)
    lead = own.sum_s - own.max_s  # the first chunk's other stages: 0 at pp 1 (the figures there as before)
    steps = request.output / request.accepted
    # Closed loop: a request arrives as its predecessor's last token leaves, while the next step, scheduled
    # during the last one, is already under way without it; it waits out that decode step (its slot idles
    # for it, so the wait is in the round too). Measured on the calibration rows (docs/calibration-log.md, session 10).
    k = engine.cohort_fraction
    seqs = seqs_per_rank(plan.in_service, plan.ctx.par.dp)
    units = seqs * plan.own_steps  # a rank's staggered prompt steps per round
    ranks = unaligned_ranks(plan.ctx, plan.in_service)
    # A staggered request's own prompt step: where other ranks' prompts are not aligned with it, its chunk alone
    # beside the others' decodes (`lone`), else the aligned step of every rank in service carrying one (`own`)
    lone = time_phase(plan.lone, pricer) if plan.lone is not None and ranks > 1 else own
    alone_step, alone_lead = lone.max_s, lone.sum_s - lone.max_s
    stretch = max(0.0, alone_step - decode.max_s)  # a decode step stretched to another rank's prompt step
    slots = plan.ctx.par.pp * steps  # micro-batch steps of a rank's round
    if plan.ctx.prefill_first:
        # Prefill first: a request staggered from the others runs its prompt alone; one of a cohort waits for
        # the prompt batches ahead of it and its own, (batches + own) / 2 on average. Every prompt batch
        # stalls the decodes, so the round adds them to the decode steps (the prompt's step gives the first
        # token, decode steps the other osl - 1): one batch per chunk for a cohort, one prompt at a time (its
        # own steps each) for staggered arrivals, those of the busiest rank, and the decode steps of its round
        # that other attention-DP ranks' prompts stretch (`stretched_slots`).
        alone = units * alone_step + seqs * alone_lead + stretched_slots(ranks, units, slots) * stretch
        prompt_s = (1.0 - k) * alone + k * plan.mixed_steps * t_mix
        ttft = (t_decode + (1.0 - k) * alone_step * plan.own_steps + (1.0 - k) * alone_lead
                + k * t_mix * (plan.mixed_steps + plan.own_steps) / 2.0 + first_token)
        cycle = t_decode + max(0.0, request.output - 1.0) / request.accepted * t_decode + prompt_s
    else:
        backlog = max(0.0, plan.mixed_steps - plan.own_steps)
        own_s, own_lead = own.max_s, lead
        if ranks > 1:  # staggered, the request's chunk alone; a cohort's prompts start together on every rank
            own_s, own_lead = (1.0 - k) * alone_step + k * own.max_s, (1.0 - k) * alone_lead + k * lead
        ttft = t_decode + own_s * plan.own_steps + own_lead + k * t_mix * backlog / 2.0 + first_token
        # the prompt chunks ride on decode steps; any left over (prefill outpacing decode) run as steps of
        # their own; staggered and unaligned, each step lasts as long as the busiest rank's own chunks
        # (`busiest_units`), where that outlasts the round's aligned chunks
        prompt_s = plan.mixed_steps * t_mix
        if ranks > 1:
            per_step = max(1, int(ENGINE_STEP_TOKENS // max(request.new, 1.0)))  # own chunks in a step's budget
            unaligned = busiest_units(ranks, units, slots, per_step) * stretch
            prompt_s += (1.0 - k) * max(0.0, unaligned - plan.mixed_steps * (t_mix - t_decode))
        cycle = t_decode + prompt_s + max(0.0, steps - plan.mixed_steps) * t_decode
    # Under attention DP an engine may hold a prompt back for some decode steps (TRT-LLM balances context
    # requests across the ranks when the launch enables it: `Scenario.attention_dp_balance`); the request and
    # its slot wait, so the round grows by as much.
    dp_wait = engine.dp_wait_steps * t_decode if plan.ctx.holds_prompts and plan.ctx.par.dp > 1 else 0.0
    ttft, cycle = ttft + dp_wait, cycle + dp_wait
    # Closed loop: a request's end-to-end time is the round, so its TPOT is what the round leaves after its
    # first token, (round - TTFT) / (osl - 1), as benchmarks measure it; never below a decode-only step.
    tpot = t_decode / request.accepted
    if request.output > 1:
        tpot = max(tpot, (cycle - ttft) / (request.output - 1))
    # ...and the round is at least that path, TTFT and the decode steps after it: a prompt's pipeline fill (pp >
    # 1), its first-token latency or its wait in a cohort can outlast the round's share of prompt work, and the
    # slot waits them out (until session 22 the round kept the share, and tokens/s the difference)
    cycle = max(cycle, ttft + max(0.0, request.output - 1.0) * tpot)
    return PoolTiming(plan, None, decode, mixed, ttft, tpot, cycle, first_token_s=first_token, step_wait_s=t_decode,
                      dp_wait_s=dp_wait, prompt_s=prompt_s)


def unaligned_ranks(ctx: PoolContext, in_service: int) -> int:
    """Attention-DP ranks in service whose staggered prompts fall independently of each other's: every rank
    holding requests (a batch below the DP degree leaves some empty), or 1 where the engine aligns prompts
    across ranks (TRT-LLM's balancing, `PoolContext.holds_prompts`) or there is one rank."""
    if ctx.holds_prompts:
        return 1
    return int(min(ctx.par.dp, max(1, in_service)))


def stretched_slots(ranks: int, units: float, slots: float) -> float:
    """Prefill first: a rank's decode slots during which another of `ranks` ranks runs a prompt step (the ranks
    step together, so the slot lasts a prompt step). Each rank places its `units` prompt steps at random among
    its `slots` decode slots and them, so a slot meets another's prompt with probability 1 - (1 - q)^(ranks - 1),
    q = units / (slots + units): the exact expectation, at most `slots`, growing with the units."""
    if ranks <= 1 or slots <= 0.0 or units <= 0.0:
        return 0.0
    share = units / (slots + units)
    return slots * -math.expm1((ranks - 1) * math.log1p(-share))


def busiest_units(ranks: int, units: float, slots: float, per_step: int) -> float:
    """Piggyback: a round's prompt units (own-chunk steps) as the busiest of `ranks` ranks carries them, slot by
    slot. Each rank spreads its `units` over its `slots` decode slots at random, up to `per_step` own chunks in a
    step's token budget: per slot a Binomial(per_step, q / per_step) count, q = units / slots, the busiest of
    the ranks E[max] of them (`expected_max_binomial`): slots x that, from `units` (one rank) to slots x
    per_step, growing with the units. Every slot full (q >= per_step): prompts outpace decode on every rank,
    all aligned: `units`."""
    if slots <= 0.0 or units <= 0.0:
        return units
    share = units / slots
    if ranks <= 1 or share >= per_step:
        return units
    return slots * expected_max_binomial(per_step, share, ranks)


def fill_parts(fill_s: float, first_token_s: float, step_wait_s: float = 0.0,
               dp_wait_s: float = 0.0) -> dict[str, float]:
    """A fill's share of TTFT, as reports name it: the decode step a mixed pool's arrival waits out
    (`PoolTiming.step_wait_s`), the steps an engine holds it back under attention DP (`PoolTiming.dp_wait_s`),
    the fill's steps and, where the engine adds one, its first-token latency (`PoolTiming.first_token_s`)."""
    return (({"step_under_way": step_wait_s} if step_wait_s else {})
            | ({"attention_dp_wait": dp_wait_s} if dp_wait_s else {})
            | {"fill": fill_s - first_token_s - step_wait_s - dp_wait_s}
            | ({"first_token_latency": first_token_s} if first_token_s else {}))


def pool_memory(ctx: PoolContext, pool: Pool, workload: Workload,
                request: RequestShape) -> tuple[MemoryUse, Callable[[], int]]:
    """Memory per GPU at the pool's batch (the whole context of `request` held as KV, on the fullest
    attention-DP rank when lengths vary), and the largest batch that fits, exactly: the same memory count
    at that batch fits, one more does not. The latter is a partial, not a closure: every timed batch's plan
    keeps it, and a closure would keep its cells and inner functions alive too."""
    use = _memory_at(ctx, pool, workload, request)
    return use(pool.batch), functools.partial(_largest_batch, ctx, pool, workload, request)


def _largest_batch(ctx: PoolContext, pool: Pool, workload: Workload, request: RequestShape) -> int:
    use = _memory_at(ctx, pool, workload, request)
    return largest_fitting(lambda batch: use(batch).fits, _secant_guess(use, ctx.par.dp))


def _memory_at(ctx: PoolContext, pool: Pool, workload: Workload,
               request: RequestShape) -> Callable[[int], MemoryUse]:
    """Memory per GPU of the pool's layout at any batch (see `pool_memory`)."""
    context = request.cached + request.new
    with_output = pool.role in ("mixed", "decode")
    if with_output:
        context += workload.output_tokens
    with_mtp = workload.speculative.method == "mtp"
    spread = request.spread

    def reserved(batch: int) -> float:
        """Whole context per sequence on the fullest rank (the one length without a spread)."""
        if spread is None:
            return context
        seqs = seqs_per_rank(batch, ctx.par.dp)
        mean, var, largest = spread.reserved(with_output)
        return slowest_of(_whole(min(batch, ctx.par.dp)), seqs, mean, var, largest) / seqs

    def step_tokens(batch: int) -> float:
        """Activations in flight per step: a full chunk where prefills run, else one decode step's tokens."""
        if pool.role == "decode":
            return batch / ctx.par.dp * (1 + request.draft)
        if pool.role == "mixed" and ctx.prefill_batch_tokens is not None:
            return ctx.prefill_batch_tokens  # a prefill-first engine's batch, with no decode tokens beside it
        return float(ENGINE_STEP_TOKENS)

    def use(batch: int) -> MemoryUse:
        return memory_use(ctx, batch, reserved(batch), step_tokens(batch), with_mtp)

    return use


def _secant_guess(use: Callable[[int], MemoryUse], dp: int) -> int:
    """Where memory, nearly linear in the batch past one sequence per rank, reaches capacity: the line
    through one and two sequences per rank (exact but for the workspace's kinks), so that
    `largest_fitting` needs only a check or two."""
    one, two = use(dp), use(2 * dp)
    slope = (two.total - one.total) / dp
    if slope <= 0:
        return dp
    return max(1, int(dp + (one.capacity - one.total) / slope))


def admitted_plan(plan: PoolPlan, workload: Workload) -> PoolPlan:
    """A mixed pool whose batch does not fit in HBM runs as engines run it: the largest batch that fits is in
    service (vLLM and SGLang admit requests while KV blocks last, TRT-LLM's capacity scheduler likewise)
    and the rest wait for a slot. The memory report stays the requested batch's."""
    if plan.pool.role != "mixed" or plan.memory.fits or not 0 < plan.max_batch < plan.pool.batch:
        return plan
    capped = plan.pool.model_copy(update={"batch": plan.max_batch})
    served = plan_pool(plan.ctx, capped, workload, plan.request.tiers, plan.turns)
    largest = plan.max_batch
    return replace(served, pool=plan.pool, memory=plan.memory, largest_batch=lambda: largest, admitted=largest)
