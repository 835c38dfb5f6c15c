"""The deployment MILP at one TTFT cap `eps` and one Dinkelbach ratio `q`.

maximise  osl X - q G  (+ for an aggregated choice c: G_c (v_c - q))
where X is the disaggregated deployment's request rate, G its GPUs and osl the output tokens per
request; the ratio osl X / G (tokens/s per GPU) is maximised by Dinkelbach's iterations on q
(`planner.sweep`).

Counting, not indexing: a prefill configuration y = (candidate p, P instances) and a decode configuration
z = (candidate d, D instances) are each chosen once (one-hot), so capacity cap_y = P mu_p and
concurrency C_z = D b_d are constants of the choice. Instances of one candidate are identical, so no
symmetric copies exist.

Exactness. The cost model's steady state (`costmodel.disaggregated.disaggregated_serving`) has rate
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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from planner.formulation.linear import Expr, LinearModel, add_expr
from planner.formulation.options import DecodeOption, DeploymentOptions, MixedOption, PrefillOption
from planner.formulation.pairs import PairTable
from planner.formulation.screening import Screened, screen
from planner.placement import Domains, packing_rows

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
    first: PrefillOption | None = None  # with a separate midfill pool: the first-turn prefill pool
    firsts: int = 0
    midfill: PrefillOption | None = None
    midfills: int = 0


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
    first: list[_Config[PrefillOption]] = field(default_factory=list)
    midfill: list[_Config[PrefillOption]] = field(default_factory=list)

    def selection(self, values: tuple[float, ...]) -> Selection:
        for var, option in self.mixed:
            if values[var] > 0.5:
                return Selection(mixed=option)
        prefill, first, midfill = (_picked(group, values) for group in (self.prefill, self.first, self.midfill))
        decode = _picked(self.decode, values)
        if decode is None or (prefill is None and (first is None or midfill is None)):
            raise InvalidSolution("the solution selects no deployment")  # the choice rows forbid it
        if prefill is not None:
            return Selection(prefill=prefill.option, prefills=prefill.count, decode=decode.option,
                             decodes=decode.count)
        assert first is not None and midfill is not None
        return Selection(decode=decode.option, decodes=decode.count, first=first.option, firsts=first.count,
                         midfill=midfill.option, midfills=midfill.count)

    def fewest_gpus(self) -> int:
        """GPUs of the smallest deployment the model holds."""
        sizes = [option.point.gpus for _, option in self.mixed]
        if self.decode:
            fewest_decode = min(c.gpus for c in self.decode)
            if self.prefill:
                sizes.append(min(c.gpus for c in self.prefill) + fewest_decode)
            if self.first and self.midfill:
                sizes.append(min(c.gpus for c in self.first) + min(c.gpus for c in self.midfill) + fewest_decode)
        return max(1, min(sizes, default=1))

    def _chosen(self, chosen: Selection) -> list[int]:
        """The configuration variables of `chosen` that the model holds."""
        picks = ((self.prefill, chosen.prefill, chosen.prefills), (self.decode, chosen.decode, chosen.decodes),
                 (self.first, chosen.first, chosen.firsts), (self.midfill, chosen.midfill, chosen.midfills))
        return [c.var for group, option, count in picks for c in group if c.option is option and c.count == count]

    def exclude(self, chosen: Selection) -> None:
        """No-good cut: forbid these pool configurations together."""
        wanted = sum(option is not None for option in (chosen.prefill, chosen.decode, chosen.first, chosen.midfill))
        held = self._chosen(chosen)
        if len(held) == wanted:  # else screening already removed one of them
            self.model.add(f"nogood-{len(self.model.constraints)}", "packing", dict.fromkeys(held, 1.0), "<=",
                           float(wanted - 1))

    def hint(self, chosen: Selection) -> None:
        """Start from `chosen` where it is still in the model (the solver repairs the rest)."""
        for var, option in self.mixed:
            self.model.hint[var] = float(option is chosen.mixed)
        held = set(self._chosen(chosen))
        for config in self.configs():
            self.model.hint[config.var] = float(config.var in held)

    def configs(self) -> list[AnyConfig]:
        """Every pool's configurations together (for rows that treat them alike)."""
        return [*self.prefill, *self.first, *self.midfill, *self.decode]


def _picked(configs: list[_Config[OptionT]], values: tuple[float, ...]) -> _Config[OptionT] | None:
    return next((c for c in configs if values[c.var] > 0.5), None)


@dataclass(frozen=True)
class _Group:
    """Fill configurations of one kind: the share of requests they fill and their KV transfer times by
    size pair."""

    name: str
    configs: list[_Config[PrefillOption]]
    share: float
    transfer_s: dict[tuple[int, int], float]
    links: dict[tuple[int, int], tuple[float, float]]


def build_model(options: DeploymentOptions, eps_s: float | None, q: float, q_feasible: bool = False,
                pairs: PairTable | None = None, pair_bound: bool = False,
                screened: Screened | None = None) -> DeploymentModel:
    """The MILP of the module docstring at TTFT cap `eps_s` (None: no cap) and ratio `q`; `q_feasible`
    says that q is the exact ratio of a deployment within the cap (it allows bound screening). With
    `screened`, the configurations are those (cluster accounting screens them with `screen_cluster`);
    q = 0 then makes the objective the deployment's tokens/s."""
    dm = DeploymentModel(LinearModel())
    if screened is None:
        screened = screen(options, eps_s, q, q_feasible, pairs, pair_bound)
    model = dm.model
    for index, option in enumerate(screened.mixed):
        var = model.binary(f"mixed{index}", "choice")
        dm.mixed.append((var, option))
        model.objective[var] = option.point.tokens_per_s - q * option.point.gpus
    one: Expr = {var: 1.0 for var, _ in dm.mixed}
    structures: list[tuple[int, list[_Group]]] = []
    if screened.prefill and screened.decode:
        var = model.binary("disaggregated", "choice")
        dm.prefill = _one_hot(model, "prefill", screened.prefill, {var: 1.0})
        structures.append((var, [_Group("prefill", dm.prefill, 1.0, options.kv_transfer_s, options.links)]))
    if screened.first and screened.midfill and screened.decode and options.split is not None:
        var = model.binary("split", "choice")
        dm.first = _one_hot(model, "first", screened.first, {var: 1.0})
        dm.midfill = _one_hot(model, "midfill", screened.midfill, {var: 1.0})
        first, midfill = options.split
        structures.append((var, [_Group("first", dm.first, first.share, first.transfer_s, first.links),
                                 _Group("midfill", dm.midfill, midfill.share, midfill.transfer_s, midfill.links)]))
    if structures:
        chosen = {var: 1.0 for var, _ in structures}
        one.update(chosen)
        dm.decode = _one_hot(model, "decode", screened.decode, chosen)
        _define_disaggregated(dm, options, structures, eps_s, q)
    model.add("choice-one-deployment", "choice", one, "==", 1.0)
    return dm


def _one_hot(model: LinearModel, role: str, items: list[tuple[OptionT, int]],
             chosen: Expr) -> list[_Config[OptionT]]:
    """One binary per configuration of a pool; exactly one when a structure that has the pool is chosen."""
    configs = [_Config(model.binary(f"{role}{i}", "choice"), item, count) for i, (item, count) in enumerate(items)]
    model.add(f"choice-{role}", "choice", add_expr({c.var: 1.0 for c in configs}, _scaled(chosen, -1.0)), "==", 0.0)
    return configs


def _define_disaggregated(dm: DeploymentModel, options: DeploymentOptions, structures: list[tuple[int, list[_Group]]],
                          eps_s: float | None, q: float) -> None:
    model = dm.model
    groups = [group for _, kinds in structures for group in kinds]
    rho, rho_decode = _define_utilisation(dm, groups)
    rate_max = max(_structure_rate_max(kinds) for _, kinds in structures)
    shortest = shortest_fill_s(options)
    decode_bounds = [_decode_rate_bound(shortest, c) for c in dm.decode]
    # The decode side bounds X too, often far more tightly (gpt-oss-20b on 4 B200: 0.49 requests/s against a
    # prefill capacity of 62): a tighter LP, and CP-SAT's rate grid (`RATE_STEPS` of the range) that much finer.
    rate_max = min(rate_max, max(decode_bounds))
    rate_var = model.add_var("rate", "rate", 0.0, rate_max, False, rate_max / RATE_STEPS)
    rate: Expr = {rate_var: 1.0}
    rates = _structure_rates(model, structures, rate_var, rate_max)
    fill_time = _define_fill_capacity(dm, structures, rates, rho)
    x_decode = _copies(model, dm.decode, rate_max, "rate-decode", decode_bounds)
    model.add("rate-decode-sum", "rate", add_expr(dict.fromkeys(x_decode, 1.0), _scaled(rate, -1.0)), "==", 0.0)
    transfer_time: Expr = {}
    fill_latency: Expr = {}
    carried: list[tuple[_Group, dict[tuple[int, int], int]]] = []
    for (_, kinds), structure_rate in zip(structures, rates, strict=True):
        for group in kinds:
            pairs, x_pair = _define_transfer_pairs(dm, group, structure_rate, rate_max, len(groups) == 1)
            carried.append((group, x_pair))
            transfer_time.update({v: group.transfer_s[k] for k, v in x_pair.items()})
            fill_latency.update({c.var: group.share * c.option.fill_s for c in group.configs})
            fill_latency.update({v: group.share * group.transfer_s[k] for k, v in pairs.items()})
    concurrency: Expr = {c.var: float(c.option.slots * c.count) for c in dm.decode}
    decoding = {v: c.option.decoding_s for v, c in zip(x_decode, dm.decode, strict=True)}
    elsewhere = add_expr(fill_time, transfer_time, decoding)
    cohort = {v: options.cohort_fraction / 2.0 * (c.option.slots * c.count - 1)
              for v, c in zip(rho_decode, dm.decode, strict=True)}
    model.add("cohort-rate", "cohort", add_expr(elsewhere, cohort, _scaled(concurrency, -1.0)), "<=", 0.0)
    if eps_s is not None:
        model.add("ttft-cap", "ttft", add_expr(_scaled(rate, eps_s), decoding, _scaled(concurrency, -1.0)), ">=", 0.0)
        model.add("ttft-fill", "ttft", fill_latency, "<=", eps_s)
    _define_store(dm, options)
    _define_links(dm, carried)
    _define_packing(dm, options)
    model.objective.update(_scaled(rate, float(options.output_tokens)))
    for config in dm.configs():
        model.objective[config.var] = -q * config.gpus


def _define_utilisation(dm: DeploymentModel, groups: list[_Group]) -> tuple[dict[str, list[int]], list[int]]:
    """Utilisation copies per fill configuration (share X <= cap_y rho^y, rho^y <= tier_load: a pool whose
    KV tiers are sized for part of its rate admits no more) and per decode configuration, which carry the
    busiest fill pool's utilisation into the cohort row (an equality with one fill pool)."""
    model = dm.model
    rho = {group.name: _copies(model, group.configs, 1.0, _tagged("rho-", group, "prefill"),
                               [c.option.load for c in group.configs]) for group in groups}
    rho_decode = _copies(model, dm.decode, 1.0, "rho-decode")
    for group in groups:
        utilisation = add_expr(dict.fromkeys(rho[group.name], 1.0), dict.fromkeys(rho_decode, -1.0))
        model.add(_tagged("rate-utilisation-", group).rstrip("-"), "rate", utilisation,
                  "==" if len(groups) == 1 else "<=", 0.0)
    return rho, rho_decode


def _define_fill_capacity(dm: DeploymentModel, structures: list[tuple[int, list[_Group]]], rates: list[Expr],
                          rho: dict[str, list[int]]) -> Expr:
    """share X_s <= cap_y rho^y per fill group; returns the fill-time term sum_y t_y cap_y rho^y."""
    fill_time: Expr = {}
    for (_, kinds), structure_rate in zip(structures, rates, strict=True):
        for group in kinds:
            own = {v: c.option.capacity * c.count for v, c in zip(rho[group.name], group.configs, strict=True)}
            fill_time.update({v: c.option.fill_s * own[v] for v, c in zip(rho[group.name], group.configs, strict=True)})
            # X <= cap rho only: rho >= X / cap is all the cohort row needs, and an inequality keeps CP-SAT's
            # rounded coefficients from making the row infeasible (equalities join same-resolution copies only).
            dm.model.add(_tagged("rate-capacity-", group).rstrip("-"), "rate",
                         add_expr(_scaled(structure_rate, group.share), _scaled(own, -1.0)), "<=", 0.0)
    return fill_time


def _tagged(prefix: str, group: _Group, plain: str = "") -> str:
    """Names of the shared prefill group as before; other groups tagged with their kind."""
    return prefix + (plain if group.name == "prefill" else group.name + "-")


def _structure_rate_max(groups: list[_Group]) -> float:
    """Most requests per second any configuration of a structure's fill pools serves."""
    return min(max(c.option.capacity * c.count for c in group.configs) / group.share for group in groups)


def _structure_rates(model: LinearModel, structures: list[tuple[int, list[_Group]]], rate_var: int,
                     rate_max: float) -> list[Expr]:
    """Each structure's rate: the deployment's rate X when there is one structure, else a copy of X per
    structure (zero unless it is chosen), the copies adding up to X."""
    if len(structures) == 1:
        return [{rate_var: 1.0}]
    copies = [model.add_var(f"rate-structure{i}", "rate", 0.0, rate_max, False, rate_max / RATE_STEPS)
              for i in range(len(structures))]
    model.add("rate-structures", "rate", add_expr(dict.fromkeys(copies, 1.0), {rate_var: -1.0}), "==", 0.0)
    for index, (copy, (var, _)) in enumerate(zip(copies, structures, strict=True)):
        model.add(f"rate-structure-link{index}", "rate", {copy: 1.0, var: -rate_max}, "<=", 0.0)
    return [{copy: 1.0} for copy in copies]


def _decode_rate_bound(shortest_s: float, config: _Config[DecodeOption]) -> float:
    """X <= C / (fill + transfer + Z): the shortest possible cycle (`shortest_fill_s` + Z) bounds the rate
    (tightens the LP)."""
    return config.option.slots * config.count / (shortest_s + config.option.decoding_s)


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


def _define_transfer_pairs(dm: DeploymentModel, group: _Group, rate: Expr, rate_max: float,
                           single: bool) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
    """`transfer`: the size pair of the group's chosen fill instance and the decode instance, for the KV
    transfer time; rate copies per pair add up to the group's share of the rate. With several groups a
    pair may be chosen only with its decode size (<=), the fill side fixing that one pair is chosen."""
    model, tag = dm.model, "" if group.name == "prefill" else f"{group.name}-"
    sizes = (sorted({c.option.gpus for c in group.configs}), sorted({c.option.gpus for c in dm.decode}))
    pairs = {(a, b): model.binary(f"pair-{tag}{a}-{b}", "transfer") for a in sizes[0] for b in sizes[1]}
    for side, configs in ((0, group.configs), (1, dm.decode)):
        for size in sizes[side]:
            expr = {v: 1.0 for k, v in pairs.items() if k[side] == size}
            expr.update({c.var: -1.0 for c in configs if c.option.gpus == size})
            model.add(f"transfer-{tag}{side}-{size}", "transfer", expr, "==" if single or side == 0 else "<=", 0.0)
    copies = {}
    for key, var in pairs.items():
        copies[key] = model.add_var(f"rate-pair-{tag}{key[0]}-{key[1]}", "transfer", 0.0, rate_max, False,
                                    rate_max / RATE_STEPS)
        model.add(f"transfer-link-{tag}{key[0]}-{key[1]}", "transfer", {copies[key]: 1.0, var: -rate_max}, "<=", 0.0)
    # The group's share of the rate: an equality for the one group of a single structure (as before), else >=
    # (more transfer time never helps, and CP-SAT cannot meet a fractional equality on its grid).
    model.add(f"transfer-{tag}rate-sum", "transfer",
              add_expr(dict.fromkeys(copies.values(), 1.0), _scaled(rate, -group.share)),
              "==" if single else ">=", 0.0)
    return pairs, copies


def _define_links(dm: DeploymentModel, carried: list[tuple[_Group, dict[tuple[int, int], int]]]) -> None:
    """`links`: the KV each fill group sends over the NICs (size pairs that leave a domain) within what its
    chosen pool's GPUs carry, P a e / kv requests/s (e: a fill GPU's egress bandwidth, kv: bytes per
    request), and what the decode pool's GPUs receive within D b i / kv (`costmodel.disaggregated.kv_link_rate`);
    rows in requests/s, so coefficients stay O(1). One configuration per pool is chosen, so each row's right
    side is the chosen pool's limit."""
    model = dm.model
    kv_ref = max((c.option.kv_bytes for group, _ in carried for c in group.configs), default=0.0)
    inbound: dict[int, Expr] = {}
    ingress: dict[int, float] = {}
    for group, x_pair in carried:
        if not group.links:
            continue
        kv = max(c.option.kv_bytes for c in group.configs)
        if kv <= 0:  # no KV to move: no link row
            continue
        tag = "" if group.name == "prefill" else f"{group.name}-"
        for a in sorted({a for a, _ in group.links}):
            sent = {x_pair[(a, b)]: 1.0 for (a2, b) in group.links if a2 == a and (a, b) in x_pair}
            egress = next(e for (a2, _), (e, _) in group.links.items() if a2 == a)
            limit = {c.var: -c.count * a * egress / kv for c in group.configs if c.option.gpus == a}
            if sent and limit:
                model.add(f"links-{tag}egress-{a}", "links", add_expr(sent, limit), "<=", 0.0)
        for (a, b), (_, into) in group.links.items():
            if (a, b) in x_pair:
                inbound.setdefault(b, {})[x_pair[(a, b)]] = kv / kv_ref
                ingress[b] = into
    for b, received in sorted(inbound.items()):
        limit = {c.var: -c.count * b * ingress[b] / kv_ref for c in dm.decode if c.option.gpus == b}
        if limit:
            model.add(f"links-ingress-{b}", "links", add_expr(received, limit), "<=", 0.0)


def shortest_fill_s(options: DeploymentOptions) -> float:
    """Shortest mean fill plus KV transfer of any disaggregated structure."""
    shortest = [min(p.fill_s for p in options.prefill) + min(options.kv_transfer_s.values())] if options.prefill else []
    if options.split is not None:
        shortest.append(sum(group.shortest_s for group in options.split))
    return min(shortest)


def _define_store(dm: DeploymentModel, options: DeploymentOptions) -> None:
    """`kv_store`: the idle contexts the fill pool that holds sessions (prefill, or midfill when separate)
    parks in the cluster's shared store, and the fetches it makes from it, sized for the pool's full rate:
    sum_y P_y s_p y <= capacity and the same for bandwidth (rows divided by the limit, so coefficients stay
    O(1)). One such configuration is chosen, so each row bounds P per candidate; `options` already caps
    `most` there, and the rows state it for the model."""
    store = options.store
    if store is None:
        return
    holders = [*dm.prefill, *dm.midfill]
    for name, limit, uses in (("capacity", store.capacity_bytes, [c.option.store.bytes for c in holders]),
                              ("bandwidth", store.bandwidth_bytes_per_s,
                               [c.option.store.bytes_per_s for c in holders])):
        row = {c.var: use * c.count / limit for c, use in zip(holders, uses, strict=True) if use > 0}
        if row:
            dm.model.add(f"kv-store-{name}", "kv_store", row, "<=", 1.0)


def _define_packing(dm: DeploymentModel, options: DeploymentOptions) -> None:
    """`packing`: instances in scale-up domains and racks (`planner.placement.packing_rows`), per inventory
    group: the fill and decode pools share one group's rows, or each has its own group's."""
    fills = [*dm.prefill, *dm.first, *dm.midfill]
    if options.shared_domains:
        _packing_rows(dm, options.domains, [*fills, *dm.decode], "")
    else:
        _packing_rows(dm, options.domains, fills, "fill-")
        _packing_rows(dm, options.decode_room, list(dm.decode), "decode-")


def _packing_rows(dm: DeploymentModel, domains: Domains, configs: Sequence[AnyConfig], tag: str) -> None:
    for row in packing_rows(domains, [c.option.gpus for c in configs]):
        expr = {c.var: float(row.weight(c.option.gpus) * c.count) for c in configs if row.weight(c.option.gpus)}
        if expr:
            dm.model.add(f"packing-{tag}{row.name}", "packing", expr, "<=", float(row.rhs))
