"""The deployment MILP at one TTFT cap `eps` and one Dinkelbach ratio `q`.

maximise  osl X - q G  (+ for an aggregated choice c: G_c (v_c - q))
where X is the disaggregated deployment's request rate, G its GPUs and osl the output tokens per
request; the ratio osl X / G (tokens/s per GPU) is maximised by Dinkelbach's iterations on q
(`planner.sweep`).

Counting, not indexing: a prefill configuration y = (candidate p, P instances) and a decode configuration
z = (candidate d, D instances) are each chosen once (one-hot), so capacity cap_y = P mu_p and
concurrency C_z = D b_d are constants of the choice. Instances of one candidate are identical, so no
symmetric copies exist.

Exactness. The cost model's steady state (`costmodel.serving.disaggregated_serving`) has rate
X = min(C / A, cap, C / (A + k (C - 1) / (2 cap))), A = t_p + t_kv + Z_d, k the cohort fraction, and
TTFT = C / X - Z_d. With rho = X / cap the prefill pool's utilisation, carried in copies rho^y (zero
unless y is chosen) and rho_z (zero unless z is):
- `rate`:    X <= sum_y cap_y rho^y,  sum_y rho^y = sum_z rho_z,  0 <= rho <= 1  (so X <= cap);
- `cohort`:  A X + (k / 2) sum_z (C_z - 1) rho_z <= C  (the third bound; it implies X <= C / A);
- `ttft`:    eps X + sum_z Z_z X_z >= C  (TTFT <= eps), and t_p + t_kv <= eps.
A X is linear through copies of X per decode configuration (Z_d X) and per size pair (t_kv X), and
t_p X = sum_y t_p cap_y rho^y. Every product is a binary times a bounded continuous variable, modelled
exactly by its copy: the MILP's optimum is the cost model's, with no approximation.

Multi-turn sessions with a shared KV store (`kv_store`): what the prefill configuration parks in the store
and fetches from it within the store's capacity and bandwidth (`_define_store`).

Packing: instance sizes are powers of two here (tp, dp, pp are), so the instances fit the scale-up
domains iff, for every size s, the GPUs of instances of size >= s fit in the domains' multiples of s
(divisible sizes: first-fit decreasing is optimal). Instances larger than a domain take whole domains.
Other sizes are checked exactly after the solve (`planner.placement.fits`), with a cut if they fail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from planner.formulation.linear import Expr, LinearModel, add_expr
from planner.formulation.options import DecodeOption, DeploymentOptions, MixedOption, PrefillOption
from planner.formulation.pairs import PairTable
from planner.formulation.screening import screen

RATE_STEPS = 2**20  # CP-SAT resolution of rates and utilisation: 1e-6 of their range


class InvalidSolution(Exception):
    """A backend returned values that break the model's rows (reported as a backend error)."""


@dataclass(frozen=True)
class Selection:
    """A decoded solution: an aggregated choice, or a prefill/decode pair with instance counts."""

    mixed: MixedOption | None = None
    prefill: PrefillOption | None = None
    prefills: int = 0
    decode: DecodeOption | None = None
    decodes: int = 0


OptionT = TypeVar("OptionT", PrefillOption, DecodeOption)


@dataclass(frozen=True)
class _Config(Generic[OptionT]):
    """One-hot choice of a candidate with a count of instances."""

    var: int
    option: OptionT
    count: int

    @property
    def gpus(self) -> int:
        return self.option.gpus * self.count


AnyConfig = _Config[PrefillOption] | _Config[DecodeOption]


@dataclass
class DeploymentModel:
    model: LinearModel
    mixed: list[tuple[int, MixedOption]] = field(default_factory=list)
    prefill: list[_Config[PrefillOption]] = field(default_factory=list)
    decode: list[_Config[DecodeOption]] = field(default_factory=list)

    def selection(self, values: tuple[float, ...]) -> Selection:
        for var, option in self.mixed:
            if values[var] > 0.5:
                return Selection(mixed=option)
        prefill = next((c for c in self.prefill if values[c.var] > 0.5), None)
        decode = next((c for c in self.decode if values[c.var] > 0.5), None)
        if prefill is None or decode is None:  # the choice rows forbid it: a backend's numerical failure
            raise InvalidSolution("the solution selects no deployment")
        return Selection(prefill=prefill.option, prefills=prefill.count, decode=decode.option, decodes=decode.count)

    def fewest_gpus(self) -> int:
        """GPUs of the smallest deployment the model holds."""
        sizes = [option.point.gpus for _, option in self.mixed]
        if self.prefill and self.decode:
            sizes.append(min(c.gpus for c in self.prefill) + min(c.gpus for c in self.decode))
        return max(1, min(sizes, default=1))

    def exclude(self, chosen: Selection) -> None:
        """No-good cut: forbid this prefill and decode configuration together."""
        pair = [c.var for c in self.prefill if c.option is chosen.prefill and c.count == chosen.prefills]
        pair += [c.var for c in self.decode if c.option is chosen.decode and c.count == chosen.decodes]
        if len(pair) == 2:  # else screening already removed one of them
            self.model.add(f"nogood-{len(self.model.constraints)}", "packing", dict.fromkeys(pair, 1.0), "<=", 1.0)

    def hint(self, chosen: Selection) -> None:
        """Start from `chosen` where it is still in the model (the solver repairs the rest)."""
        for var, option in self.mixed:
            self.model.hint[var] = float(option is chosen.mixed)
        for p in self.prefill:
            self.model.hint[p.var] = float(p.option is chosen.prefill and p.count == chosen.prefills)
        for d in self.decode:
            self.model.hint[d.var] = float(d.option is chosen.decode and d.count == chosen.decodes)

    def configs(self) -> list[AnyConfig]:
        """Prefill and decode configurations together (for rows that treat them alike)."""
        return [*self.prefill, *self.decode]


def build_model(options: DeploymentOptions, eps_s: float | None, q: float, q_feasible: bool = False,
                pairs: PairTable | None = None, pair_bound: bool = False) -> DeploymentModel:
    """The MILP of the module docstring at TTFT cap `eps_s` (None: no cap) and ratio `q`; `q_feasible`
    says that q is the exact ratio of a deployment within the cap (it allows bound screening)."""
    dm = DeploymentModel(LinearModel())
    screened = screen(options, eps_s, q, q_feasible, pairs, pair_bound)
    model = dm.model
    for index, option in enumerate(screened.mixed):
        var = model.binary(f"mixed{index}", "choice")
        dm.mixed.append((var, option))
        model.objective[var] = option.point.gpus * (option.point.tokens_per_s_per_gpu - q)
    one: Expr = {var: 1.0 for var, _ in dm.mixed}
    if screened.prefill:
        disaggregated = model.binary("disaggregated", "choice")
        one[disaggregated] = 1.0
        dm.prefill = _one_hot(model, "prefill", screened.prefill, disaggregated)
        dm.decode = _one_hot(model, "decode", screened.decode, disaggregated)
        _define_disaggregated(dm, options, eps_s, q)
    model.add("choice-one-deployment", "choice", one, "==", 1.0)
    return dm


def _one_hot(model: LinearModel, role: str, items: list[tuple[OptionT, int]],
             disaggregated: int) -> list[_Config[OptionT]]:
    """One binary per configuration of a pool; exactly one when the deployment is disaggregated."""
    configs = [_Config(model.binary(f"{role}{i}", "choice"), item, count) for i, (item, count) in enumerate(items)]
    model.add(f"choice-{role}", "choice", add_expr({c.var: 1.0 for c in configs}, {disaggregated: -1.0}), "==", 0.0)
    return configs


def _define_disaggregated(dm: DeploymentModel, options: DeploymentOptions, eps_s: float | None, q: float) -> None:
    model = dm.model
    rate_max = max(c.option.capacity * c.count for c in dm.prefill)
    # Rate copies: per prefill configuration through rho^y (X = cap_y rho^y), per decode configuration
    # and per size pair as X copies; utilisation copies per decode configuration for the cohort term.
    rho_prefill = _copies(model, dm.prefill, 1.0, "rho-prefill")
    rho_decode = _copies(model, dm.decode, 1.0, "rho-decode")
    model.add("rate-utilisation", "rate", add_expr(dict.fromkeys(rho_prefill, 1.0),
                                                   dict.fromkeys(rho_decode, -1.0)), "==", 0.0)
    # X <= cap rho only: rho >= X / cap is all the cohort row needs, and an inequality keeps CP-SAT's
    # rounded coefficients from making the row infeasible (equalities join same-resolution copies only).
    rate_var = model.add_var("rate", "rate", 0.0, rate_max, False, rate_max / RATE_STEPS)
    rate: Expr = {rate_var: 1.0}
    capacity = {v: c.option.capacity * c.count for v, c in zip(rho_prefill, dm.prefill, strict=True)}
    model.add("rate-capacity", "rate", add_expr(rate, _scaled(capacity, -1.0)), "<=", 0.0)
    x_decode = _copies(model, dm.decode, rate_max, "rate-decode", [_decode_rate_bound(options, c) for c in dm.decode])
    model.add("rate-decode-sum", "rate", add_expr(dict.fromkeys(x_decode, 1.0), _scaled(rate, -1.0)), "==", 0.0)
    pairs, x_pair = _define_transfer_pairs(dm, rate, rate_max)
    concurrency: Expr = {c.var: float(c.option.slots * c.count) for c in dm.decode}
    decoding = {v: c.option.decoding_s for v, c in zip(x_decode, dm.decode, strict=True)}
    elsewhere = add_expr({v: c.option.fill_s * capacity[v]
                          for v, c in zip(rho_prefill, dm.prefill, strict=True)},
                         {v: options.kv_transfer_s[k] for k, v in x_pair.items()}, decoding)
    cohort = {v: options.cohort_fraction / 2.0 * (c.option.slots * c.count - 1)
              for v, c in zip(rho_decode, dm.decode, strict=True)}
    model.add("cohort-rate", "cohort", add_expr(elsewhere, cohort, _scaled(concurrency, -1.0)), "<=", 0.0)
    if eps_s is not None:
        model.add("ttft-cap", "ttft", add_expr(_scaled(rate, eps_s), decoding, _scaled(concurrency, -1.0)), ">=", 0.0)
        fill = add_expr({c.var: c.option.fill_s for c in dm.prefill},
                        {v: options.kv_transfer_s[k] for k, v in pairs.items()})
        model.add("ttft-fill", "ttft", fill, "<=", eps_s)
    _define_store(dm, options)
    _define_packing(dm, options)
    model.objective.update(_scaled(rate, float(options.output_tokens)))
    for config in dm.configs():
        model.objective[config.var] = -q * config.gpus


def _decode_rate_bound(options: DeploymentOptions, config: _Config[DecodeOption]) -> float:
    """X <= C / (fill + transfer + Z): the shortest possible cycle bounds the rate (tightens the LP)."""
    shortest = min(p.fill_s for p in options.prefill) + min(options.kv_transfer_s.values())
    return config.option.slots * config.count / (shortest + config.option.decoding_s)


def _scaled(expr: Expr, factor: float) -> Expr:
    return {var: coeff * factor for var, coeff in expr.items()}


def _copies(model: LinearModel, configs: Sequence[AnyConfig], upper: float, name: str,
            bounds: list[float] | None = None) -> list[int]:
    """One continuous copy per configuration, in [0, bound], zero unless the configuration is chosen."""
    copies = []
    for index, config in enumerate(configs):
        bound = min(upper, bounds[index]) if bounds else upper
        copy = model.add_var(f"{name}{index}", "rate", 0.0, upper, False, upper / RATE_STEPS)
        # same resolution as the quantity copied, so CP-SAT's sums of copies stay exact
        model.add(f"{name}-link{index}", "rate", {copy: 1.0, config.var: -bound}, "<=", 0.0)
        copies.append(copy)
    return copies


def _define_transfer_pairs(dm: DeploymentModel, rate: Expr,
                           rate_max: float) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """`transfer`: the size pair of the chosen prefill and decode instances, for the KV transfer time."""
    model = dm.model
    sizes = (sorted({c.option.gpus for c in dm.prefill}), sorted({c.option.gpus for c in dm.decode}))
    pairs = {(a, b): model.binary(f"pair-{a}-{b}", "transfer") for a in sizes[0] for b in sizes[1]}
    for side, configs in ((0, dm.prefill), (1, dm.decode)):
        for size in sizes[side]:
            expr = {v: 1.0 for k, v in pairs.items() if k[side] == size}
            expr.update({c.var: -1.0 for c in configs if c.option.gpus == size})
            model.add(f"transfer-{side}-{size}", "transfer", expr, "==", 0.0)
    copies = {}
    for key, var in pairs.items():
        copies[key] = model.add_var(f"rate-pair-{key[0]}-{key[1]}", "transfer", 0.0, rate_max, False,
                                    rate_max / RATE_STEPS)
        model.add(f"transfer-link-{key[0]}-{key[1]}", "transfer", {copies[key]: 1.0, var: -rate_max}, "<=", 0.0)
    model.add("transfer-rate-sum", "transfer", add_expr(dict.fromkeys(copies.values(), 1.0), _scaled(rate, -1.0)),
              "==", 0.0)
    return pairs, copies


def _define_store(dm: DeploymentModel, options: DeploymentOptions) -> None:
    """`kv_store`: the idle contexts the prefill pool parks in the cluster's shared store, and the fetches it
    makes from it, sized for the pool's full rate: sum_y P_y s_p y <= capacity and the same for bandwidth
    (rows divided by the limit, so coefficients stay O(1)). One prefill configuration is chosen, so each
    row bounds P per candidate; `options` already caps `most` there, and the rows state it for the model."""
    store = options.store
    if store is None:
        return
    for name, limit, uses in (("capacity", store.capacity_bytes, [c.option.store.bytes for c in dm.prefill]),
                              ("bandwidth", store.bandwidth_bytes_per_s,
                               [c.option.store.bytes_per_s for c in dm.prefill])):
        row = {c.var: use * c.count / limit for c, use in zip(dm.prefill, uses, strict=True) if use > 0}
        if row:
            dm.model.add(f"kv-store-{name}", "kv_store", row, "<=", 1.0)


def _define_packing(dm: DeploymentModel, options: DeploymentOptions) -> None:
    """`packing`: instances in scale-up domains (module docstring)."""
    domains, configs = options.domains, dm.configs()
    wide = {c.var: float(c.count * math.ceil(c.option.gpus / domains.size))
            for c in configs if c.option.gpus > domains.size}
    if wide:
        dm.model.add("packing-wide", "packing", wide, "<=", domains.full)
    for size in sorted({c.option.gpus for c in configs if c.option.gpus <= domains.size}):
        per_domain = domains.size // size * size
        row = add_expr({c.var: float(c.gpus) for c in configs if size <= c.option.gpus <= domains.size},
                       _scaled(wide, per_domain))
        dm.model.add(f"packing-size{size}", "packing", row, "<=",
                     per_domain * domains.full + domains.rest // size * size)
