"""Request-length distributions: what a workload's `input_tokens` / `output_tokens` may be instead of one
number, and the moments the cost model needs of them.

Forms (each a distribution over whole tokens):
- a list of `{share, tokens}` (shares add up to 1): a histogram of a real dataset;
- `{mean: L, range_ratio: r}`: vLLM `benchmarks/datasets.py` RandomDataset (`vllm bench serve
  --random-input-len L --random-range-ratio r`): lengths uniform over the integers int(L (1 - r)) ..
  int(L (1 + r)) (numpy `randint(low, high + 1)`), output lengths at least 1; 0 <= r < 1;
- `{max: L, range_ratio: r}`: SGLang `bench_serving.py` sample_random_requests (`--random-input-len L
  --random-range-ratio r`): uniform over max(int(L r), 1) .. L; 0 <= r <= 1 (SGLang's default r = 0
  draws from 1 to L; r = 1 is the fixed length L).

Inputs and outputs are drawn independently (as both tools do). Everything the cost model asks of a
distribution is exact for these forms: moments E[X^k] by closed-form power sums over a uniform range,
and the partial expectation E[max(0, c - X)]. The effects of the spread (composition of a batch in
flight, attention-DP ranks waiting for the slowest) are derived in `costmodel.serving`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, model_validator

MAX_TOKENS = 10_000_000  # as costmodel.scenario.MAX_TOKENS (kept apart: scenario imports this module)
MAX_KINDS = 64  # entries of a length histogram


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class LengthShare(_Strict):
    """One length of a histogram and the fraction of requests that have it."""

    share: float = Field(gt=0, le=1, description="Fraction of requests of this length (the shares add up to 1).")
    tokens: int = Field(gt=0, le=MAX_TOKENS, description="Length, tokens.")


class UniformLengths(_Strict):
    """Uniformly drawn lengths as benchmark tools draw them: `mean` (vLLM's form) or `max` (SGLang's)."""

    mean: float | None = Field(
        None, ge=1, le=MAX_TOKENS / 2,
        description="vLLM --random-input-len: lengths uniform over int(mean (1 - r)) .. int(mean (1 + r)).",
    )
    max: int | None = Field(
        None, gt=0, le=MAX_TOKENS,
        description="SGLang --random-input-len: lengths uniform over max(int(max r), 1) .. max.",
    )
    range_ratio: float = Field(
        ge=0, le=1, description="--random-range-ratio r (below 1 with `mean`; SGLang's default is 0)."
    )

    @model_validator(mode="after")
    def _one_anchor(self) -> UniformLengths:
        if (self.mean is None) == (self.max is None):
            raise ValueError("give exactly one of mean (vLLM's --random-input-len) or max (SGLang's)")
        if self.mean is not None and self.range_ratio >= 1:
            raise ValueError("range_ratio must be below 1 with mean (vLLM refuses 1 and above)")
        return self


def _shares_add_up(kinds: list[LengthShare]) -> list[LengthShare]:
    total = math.fsum(kind.share for kind in kinds)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"the shares add up to {total:g}; make them add up to 1")
    return kinds


LengthHistogram = Annotated[list[LengthShare], Field(min_length=1, max_length=MAX_KINDS),
                            AfterValidator(_shares_add_up)]


def _form(raw: object) -> str:
    """The form a distribution is written in: a mapping is uniform lengths, anything else a histogram; so that
    a malformed one is reported against the form written (a bad `range_ratio` once, not also as "not a list")."""
    return "uniform" if isinstance(raw, dict | UniformLengths) else "histogram"


LengthSpec = Annotated[Annotated[LengthHistogram, Tag("histogram")] | Annotated[UniformLengths, Tag("uniform")],
                       Discriminator(_form)]
_SPEC = TypeAdapter(LengthSpec)


def parse_spec(raw: object) -> LengthSpec:
    """A length distribution as validated (pydantic's own errors for a malformed one)."""
    return _SPEC.validate_python(raw, strict=True)


def _power_sum(k: int, m: int) -> int:
    """1^k + ... + m^k for k in 0..3 (0 for m <= 0), exact in integers."""
    if m <= 0:
        return 0
    if k == 0:
        return m
    if k == 1:
        return m * (m + 1) // 2
    if k == 2:
        return m * (m + 1) * (2 * m + 1) // 6
    if k == 3:
        return (m * (m + 1) // 2) ** 2
    raise ValueError(f"power sums are implemented up to k = 3, not {k}")


@dataclass(frozen=True)
class Lengths:
    """A distribution over whole tokens: `points` (share, tokens) or, when `low` > 0, every integer of
    low..high with equal probability."""

    points: tuple[tuple[float, int], ...] = ()
    low: int = 0
    high: int = 0

    @staticmethod
    def fixed(tokens: int) -> Lengths:
        return Lengths(points=((1.0, tokens),))

    @staticmethod
    def uniform(low: int, high: int) -> Lengths:
        low = max(low, 1)
        if high <= low:
            return Lengths.fixed(max(high, low))
        return Lengths(low=low, high=high)

    @staticmethod
    def of(spec: LengthSpec, output: bool = False) -> Lengths:
        """The distribution a spec describes (`output`: vLLM keeps output lengths at least 1)."""
        if isinstance(spec, UniformLengths):
            ratio = spec.range_ratio
            if spec.mean is not None:  # vLLM: randint(int(L (1 - r)), int(L (1 + r)) + 1)
                low = int(spec.mean * (1.0 - ratio))
                return Lengths.uniform(max(low, 1) if output else low, int(spec.mean * (1.0 + ratio)))
            assert spec.max is not None  # SGLang: randint(max(int(L r), 1), L + 1)
            return Lengths.uniform(max(int(spec.max * ratio), 1), spec.max)
        merged: dict[int, float] = {}
        for kind in spec:
            merged[kind.tokens] = merged.get(kind.tokens, 0.0) + kind.share
        return Lengths(points=tuple((share, tokens) for tokens, share in sorted(merged.items())))

    @property
    def is_fixed(self) -> bool:
        return self.low == 0 and len(self.points) == 1

    @property
    def count(self) -> int:
        """Integers of a uniform range."""
        return self.high - self.low + 1

    def moment(self, k: int) -> float:
        """E[X^k], k in 1..3."""
        if self.low:
            total = _power_sum(k, self.high) - _power_sum(k, self.low - 1)
            return total / self.count
        return math.fsum(share * float(tokens) ** k for share, tokens in self.points)

    @property
    def mean(self) -> float:
        return self.moment(1)

    @property
    def variance(self) -> float:
        if self.is_fixed:
            return 0.0
        return max(0.0, self.moment(2) - self.mean**2)

    @property
    def largest(self) -> int:
        return self.high if self.low else max(tokens for _, tokens in self.points)

    def shortfall(self, c: float) -> float:
        """E[max(0, c - X)]: how far below `c` the lengths fall on average."""
        if self.low:
            top = min(self.high, math.floor(c))
            if top < self.low:
                return 0.0
            n = top - self.low + 1
            return (n * c - (_power_sum(1, top) - _power_sum(1, self.low - 1))) / self.count
        return math.fsum(share * max(0.0, c - tokens) for share, tokens in self.points)

    def length_biased(self) -> tuple[float, float]:
        """Mean and variance of the length of a request found in service when requests stay in proportion
        to their length (a token drawn at random belongs to such a request): E[X^2] / E[X] and
        E[X^3] / E[X] - (E[X^2] / E[X])^2."""
        mean = self.mean
        if self.is_fixed:
            return mean, 0.0
        first = self.moment(2) / mean
        return first, max(0.0, self.moment(3) / mean - first**2)


def expected_max_binomial(trials: int, mean: float, n: int) -> float:
    """E[max of n independent Binomial(trials, mean / trials) counts] = sum over k < trials of 1 - F(k)^n, F the
    binomial CDF, summed exactly from where F is below 1e-30 (each earlier term is 1) until the terms vanish
    (log-space probabilities: no underflow). Exactly the mean for n = 1; grows with the mean (a binomial count
    is stochastically larger at a larger success probability); `trials` once the mean reaches it."""
    if mean <= 0.0:
        return 0.0
    if n <= 1:
        return mean
    if mean >= trials:
        return float(trials)
    p = mean / trials
    spread = math.sqrt(trials * p * (1.0 - p))
    start = max(0, math.floor(mean - 14.0 * spread - 10.0))  # F(start - 1) < 1e-30 there
    total, cdf = float(start), 0.0
    log_p, log_q, log_all = math.log(p), math.log1p(-p), math.lgamma(trials + 1.0)
    for k in range(start, trials):
        mass = math.exp(log_all - math.lgamma(k + 1.0) - math.lgamma(trials - k + 1.0) + k * log_p
                        + (trials - k) * log_q)
        cdf = min(1.0, cdf + mass)
        term = -math.expm1(n * math.log(cdf)) if cdf > 0.0 else 1.0  # 1 - F^n without cancellation
        total += term
        if k > mean + spread and (term < 1e-16 or mass < 1e-18):  # past the mode: the tail is spent (rounding
            break  # can leave F a few ulps below 1, whose terms would never end)
    return total


@functools.lru_cache(maxsize=1024)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normal variables] (0 for n = 1; 1/sqrt(pi) for n = 2), by Simpson's
    rule on the density n phi(x) Phi(x)^(n - 1) over [-12, 12] (the tails beyond are below 1e-30)."""
    if n <= 1:
        return 0.0
    steps = 4800  # even; step 0.005: the integrand is smooth, Simpson's error is below 1e-10 here
    h = 24.0 / steps
    total = 0.0
    for i in range(steps + 1):
        x = -12.0 + i * h
        weight = 1.0 if i in (0, steps) else (4.0 if i % 2 else 2.0)
        density = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        cdf = 0.5 * math.erfc(-x / math.sqrt(2.0))
        total += weight * x * n * density * cdf ** (n - 1)
    return total * h / 3.0


def slowest_of(ranks: int, per_rank: float, mean: float, variance: float, largest: float) -> float:
    """Expected largest total over `ranks` ranks of `per_rank` independent items of `mean` and `variance`:
    per_rank x mean + sqrt(per_rank x variance) x E[max of `ranks` standard normals] (central limit), never
    above per_rank x largest. Without spread, exactly per_rank x mean."""
    total = per_rank * mean
    if variance <= 0.0 or ranks <= 1:
        return total
    return min(total + math.sqrt(per_rank * variance) * expected_max_normal(ranks), per_rank * largest)
