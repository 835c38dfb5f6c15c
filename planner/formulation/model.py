"""The deployment MILP at one TTFT cap `eps` and one Dinkelbach ratio `q`.

maximise  osl X - q G  (+ for an aggregated choice c: G_c (v_c - q))
where X is the disaggregated deployment's request rate, G its GPUs, osl the output tokens per request;
the ratio osl X / G (tokens/s per GPU) is maximised by Dinkelbach's iterations on q (`planner.sweep`).

Exactness. With P prefill instances of capacity mu and D decode instances of b sequences, cap = mu P and
C = b D. The cost model's steady state (`costmodel.serving.disaggregated_serving`) has rate
X = min(C / A, cap, C / (A + k (C - 1) / (2 cap))), A = t_p + t_kv + Z_d, k the cohort fraction, and
TTFT = C / X - Z_d. So, with rho = X / cap the prefill pool's utilisation:
- `capacity`:  X <= rho cap, rho <= 1;
- `cohort`:    A X + (k / 2) rho (C - 1) <= C   (the third bound; it implies the first since C >= 1);
- `ttft`:      eps X + Z_d X >= C   (TTFT <= eps), and t_p + t_kv <= eps.
The products with a selected candidate's constants (t_p X, t_kv X, Z_d X) are exact through copies of X
that vanish unless their candidate (or size pair) is selected; rho x cap and rho x C are exact through
the binary expansions of P and D (McCormick rows on rho x bit, only in the direction the optimum needs).
No approximation is made: the MILP's optimum is the cost model's.

Packing: instance sizes are powers of two here (tp, dp, pp are), so the instances fit the scale-up
domains iff, for every size s, the GPUs of instances of size >= s fit in the domains' multiples of s
(divisible sizes: first-fit decreasing is optimal). Instances larger than a domain take whole domains.
Other sizes are checked exactly after the solve (`planner.placement.fits`), with a cut if they fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.formulation.linear import Expr, LinearModel, add_expr
from planner.formulation.options import DecodeOption, DeploymentOptions, MixedOption, PrefillOption

RATE_STEPS = 2**24  # CP-SAT resolution of rates and utilisation: 6e-8 of their range


@dataclass(frozen=True)
class Selection:
    """A decoded solution: an aggregated choice, or a prefill/decode pair with instance counts."""

    mixed: MixedOption | None = None
    prefill: PrefillOption | None = None
    prefills: int = 0
    decode: DecodeOption | None = None
    decodes: int = 0


@dataclass
class _Counted:
    """Selection binary and instance-count bits of one candidate."""

    chosen: int
    bits: list[tuple[int, int]]  # (variable, weight 2^i)

    def count(self) -> Expr:
        return {var: float(weight) for var, weight in self.bits}


@dataclass
class DeploymentModel:
    model: LinearModel
    mixed: list[tuple[int, MixedOption]] = field(default_factory=list)
    prefill: list[tuple[_Counted, PrefillOption]] = field(default_factory=list)
    decode: list[tuple[_Counted, DecodeOption]] = field(default_factory=list)

    def selection(self, values: tuple[float, ...]) -> Selection:
        for var, option in self.mixed:
            if values[var] > 0.5:
                return Selection(mixed=option)
        prefill = next(((c, o) for c, o in self.prefill if values[c.chosen] > 0.5), None)
        decode = next(((c, o) for c, o in self.decode if values[c.chosen] > 0.5), None)
        if prefill is None or decode is None:
            raise RuntimeError("solution selects no deployment")  # the choice rows forbid it
        return Selection(prefill=prefill[1], prefills=_count(prefill[0], values),
                         decode=decode[1], decodes=_count(decode[0], values))

    def exclude(self, chosen: Selection) -> None:
        """No-good cut: forbid this exact prefill/decode pair and counts (a packing the rows let through)."""
        expr: Expr = {}
        rhs = 1.0
        for entries, option, count in ((self.prefill, chosen.prefill, chosen.prefills),
                                       (self.decode, chosen.decode, chosen.decodes)):
            counted = next(c for c, o in entries if o is option)  # type: ignore[attr-defined]
            expr[counted.chosen] = -1.0
            rhs -= 1.0
            for var, weight in counted.bits:
                on = count & weight
                expr[var] = expr.get(var, 0.0) + (-1.0 if on else 1.0)
                rhs -= 1.0 if on else 0.0
        self.model.add("packing-nogood", "packing", expr, ">=", rhs)


def _count(counted: _Counted, values: tuple[float, ...]) -> int:
    return sum(weight for var, weight in counted.bits if values[var] > 0.5)


def _bits(model: LinearModel, name: str, most: int) -> list[tuple[int, int]]:
    return [(model.binary(f"{name}-bit{i}", "replicas"), 1 << i) for i in range(most.bit_length())]


def build_model(options: DeploymentOptions, eps_s: float | None, q: float) -> DeploymentModel:
    """The MILP of the module docstring at TTFT cap `eps_s` (None: no cap) and ratio `q`."""
    dm = DeploymentModel(LinearModel())
    mixed = [m for m in options.mixed if eps_s is None or m.point.ttft_ms / 1e3 <= eps_s]
    shortest_transfer = min(options.kv_transfer_s.values(), default=0.0)
    prefill = [p for p in options.prefill if eps_s is None or p.fill_s + shortest_transfer <= eps_s]
    decode = list(options.decode) if prefill else []
    disaggregated = dm.model.binary("disaggregated", "mode") if prefill and decode else None
    _define_choices(dm, options, mixed, prefill, decode, disaggregated, q)
    if disaggregated is not None:
        _define_disaggregated(dm, options, eps_s, q, disaggregated)
    return dm


def _define_choices(dm: DeploymentModel, options: DeploymentOptions, mixed: list[MixedOption],
                    prefill: list[PrefillOption], decode: list[DecodeOption], disaggregated: int | None,
                    q: float) -> None:
    """`choice`: one aggregated candidate, or one prefill and one decode candidate."""
    model = dm.model
    for index, option in enumerate(mixed):
        var = model.binary(f"mixed{index}", "choice")
        dm.mixed.append((var, option))
        model.objective[var] = option.point.gpus * (option.point.tokens_per_s_per_gpu - q)
    one: Expr = {var: 1.0 for var, _ in dm.mixed}
    if disaggregated is not None:
        one[disaggregated] = 1.0
        for role, entries, items in (("prefill", dm.prefill, prefill), ("decode", dm.decode, decode)):
            chosen = [model.binary(f"{role}{i}", "choice") for i in range(len(items))]
            model.add(f"choice-{role}-one", "choice", add_expr({v: 1.0 for v in chosen}, {disaggregated: -1.0}),
                      "==", 0.0)
            for var, item in zip(chosen, items, strict=True):
                entries.append((_Counted(var, _bits(model, f"{role}{len(entries)}", item.most)), item))  # type: ignore[arg-type]
    model.add("choice-one-deployment", "choice", one, "==", 1.0)


def _define_disaggregated(dm: DeploymentModel, options: DeploymentOptions, eps_s: float | None, q: float,
                          disaggregated: int) -> None:
    _define_replicas(dm)
    rate_max = max(o.capacity * o.most for _, o in dm.prefill)
    rate = dm.model.add_var("rate", "rate", 0.0, rate_max, False, rate_max / RATE_STEPS)
    prefill_rate = _rate_copies(dm.model, rate, rate_max, "prefill", [c.chosen for c, _ in dm.prefill])
    decode_rate = _rate_copies(dm.model, rate, rate_max, "decode", [c.chosen for c, _ in dm.decode])
    pair_vars, pair_rate = _define_transfer_pairs(dm, rate, rate_max, disaggregated)
    decode_count = add_expr(*(_scaled(c.count(), o.slots) for c, o in dm.decode))  # C
    utilisation = _define_capacity(dm, rate)
    elsewhere = add_expr({v: o.fill_s for v, (_, o) in zip(prefill_rate, dm.prefill, strict=True)},
                         {v: options.kv_transfer_s[k] for k, v in pair_rate.items()},
                         {v: o.decoding_s for v, (_, o) in zip(decode_rate, dm.decode, strict=True)})
    _define_cohort(dm, options, elsewhere, decode_count, utilisation)
    if eps_s is not None:
        _define_ttft(dm, options, eps_s, rate, decode_rate, decode_count, pair_vars)
    _define_packing(dm, options)
    gpus = add_expr(*(_scaled(c.count(), o.gpus) for c, o in dm.prefill),
                    *(_scaled(c.count(), o.gpus) for c, o in dm.decode))
    dm.model.objective.update(_scaled(gpus, -q))
    dm.model.objective[rate] = float(options.output_tokens)


def _scaled(expr: Expr, factor: float) -> Expr:
    return {var: coeff * factor for var, coeff in expr.items()}


def _define_replicas(dm: DeploymentModel) -> None:
    """`replicas`: the count bits of a candidate vanish unless it is chosen, which needs one instance."""
    for counted, option in [*dm.prefill, *dm.decode]:
        for var, _ in counted.bits:
            dm.model.add(f"replicas-bit-{var}", "replicas", {var: 1.0, counted.chosen: -1.0}, "<=", 0.0)
        dm.model.add(f"replicas-least-{counted.chosen}", "replicas",
                     add_expr(counted.count(), {counted.chosen: -1.0}), ">=", 0.0)
        dm.model.add(f"replicas-most-{counted.chosen}", "replicas",
                     add_expr(counted.count(), {counted.chosen: -float(option.most)}), "<=", 0.0)


def _rate_copies(model: LinearModel, rate: int, rate_max: float, role: str, chosen: list[int]) -> list[int]:
    """Copies of the rate per candidate, zero unless chosen, summing to the rate."""
    copies = [model.add_var(f"rate-{role}{i}", "rate", 0.0, rate_max, False, rate_max / RATE_STEPS)
              for i in range(len(chosen))]
    for copy, var in zip(copies, chosen, strict=True):
        model.add(f"rate-{role}-link-{copy}", "rate", {copy: 1.0, var: -rate_max}, "<=", 0.0)
    model.add(f"rate-{role}-sum", "rate", add_expr({c: 1.0 for c in copies}, {rate: -1.0}), "==", 0.0)
    return copies


def _define_transfer_pairs(dm: DeploymentModel, rate: int, rate_max: float,
                           disaggregated: int) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """`transfer`: the size pair of the chosen prefill and decode instances, for the KV transfer time."""
    model = dm.model
    prefill_sizes = sorted({o.gpus for _, o in dm.prefill})
    decode_sizes = sorted({o.gpus for _, o in dm.decode})
    pairs = {(a, b): model.binary(f"pair-{a}-{b}", "transfer") for a in prefill_sizes for b in decode_sizes}
    for role, sizes, entries, side in (("prefill", prefill_sizes, dm.prefill, 0),
                                       ("decode", decode_sizes, dm.decode, 1)):
        for size in sizes:
            expr = {v: 1.0 for k, v in pairs.items() if k[side] == size}
            expr.update({c.chosen: -1.0 for c, o in entries if o.gpus == size})  # type: ignore[attr-defined]
            model.add(f"transfer-{role}-{size}", "transfer", expr, "==", 0.0)
    copies = _rate_copies(model, rate, rate_max, "pair", list(pairs.values()))
    return pairs, dict(zip(pairs, copies, strict=True))


def _define_capacity(dm: DeploymentModel, rate: int) -> int:
    """`capacity`: X <= rho x cap, with rho x bit linearised from above (u <= rho, u <= bit)."""
    model = dm.model
    utilisation = model.add_var("utilisation", "capacity", 0.0, 1.0, False, 1.0 / RATE_STEPS)
    served: Expr = {rate: 1.0}
    plain: Expr = {rate: 1.0}
    for counted, option in dm.prefill:
        for var, weight in counted.bits:
            product = model.add_var(f"util-bit{var}", "capacity", 0.0, 1.0, False, 1.0 / RATE_STEPS)
            model.add(f"capacity-bit-{var}", "capacity", {product: 1.0, var: -1.0}, "<=", 0.0)
            model.add(f"capacity-util-{var}", "capacity", {product: 1.0, utilisation: -1.0}, "<=", 0.0)
            served[product] = -option.capacity * weight
            plain[var] = -option.capacity * weight
    model.add("capacity-utilised", "capacity", served, "<=", 0.0)
    model.add("capacity-total", "capacity", plain, "<=", 0.0)  # implied; tightens the LP relaxation
    return utilisation


def _define_cohort(dm: DeploymentModel, options: DeploymentOptions, elsewhere: Expr, decode_count: Expr,
                   utilisation: int) -> None:
    """`cohort`: A X + (k / 2)(rho C - rho) <= C, with rho x bit linearised from below."""
    model, half_k = dm.model, options.cohort_fraction / 2.0
    row = add_expr(elsewhere, _scaled(decode_count, -1.0))
    if half_k > 0:
        row[utilisation] = row.get(utilisation, 0.0) - half_k
        for counted, option in dm.decode:
            for var, weight in counted.bits:
                product = model.add_var(f"util-bit{var}", "cohort", 0.0, 1.0, False, 1.0 / RATE_STEPS)
                model.add(f"cohort-bit-{var}", "cohort", {product: 1.0, utilisation: -1.0, var: -1.0}, ">=", -1.0)
                row[product] = half_k * option.slots * weight
    model.add("cohort-rate", "cohort", row, "<=", 0.0)


def _define_ttft(dm: DeploymentModel, options: DeploymentOptions, eps_s: float, rate: int, decode_rate: list[int],
                 decode_count: Expr, pairs: dict[tuple[int, int], int]) -> None:
    """`ttft`: TTFT = C / X - Z <= eps, and fill plus transfer within eps."""
    row = add_expr({rate: eps_s}, {v: o.decoding_s for v, (_, o) in zip(decode_rate, dm.decode, strict=True)},
                   _scaled(decode_count, -1.0))
    dm.model.add("ttft-cap", "ttft", row, ">=", 0.0)
    fill = add_expr({c.chosen: o.fill_s for c, o in dm.prefill},
                    {v: options.kv_transfer_s[k] for k, v in pairs.items()})
    dm.model.add("ttft-fill", "ttft", fill, "<=", eps_s)


def _define_packing(dm: DeploymentModel, options: DeploymentOptions) -> None:
    """`packing`: instances in scale-up domains (module docstring)."""
    domains, counted = options.domains, [*dm.prefill, *dm.decode]
    wide = add_expr(*(_scaled(c.count(), math.ceil(o.gpus / domains.size))
                      for c, o in counted if o.gpus > domains.size))
    if wide:
        dm.model.add("packing-wide", "packing", wide, "<=", domains.full)
    sizes = sorted({o.gpus for _, o in counted if o.gpus <= domains.size})
    for size in sizes:
        per_domain = domains.size // size * size
        row = add_expr(*(_scaled(c.count(), o.gpus) for c, o in counted if size <= o.gpus <= domains.size),
                       _scaled(wide, per_domain))
        dm.model.add(f"packing-size{size}", "packing", row, "<=",
                     per_domain * domains.full + domains.rest // size * size)
