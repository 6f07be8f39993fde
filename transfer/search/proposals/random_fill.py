"""Random fill (``random``): tops every round up to its size with untried random draws."""

from __future__ import annotations

from tunedb.transfer.search.proposals.base import ProposalSource, Round, SearchState, register, sig

__all__ = ["RandomFill", "random_configs"]


def random_configs(state: SearchState, n: int, exclude: set[str], max_draws: int | None = None) -> list[dict]:
    """Up to ``n`` distinct random configs of the space (``state.rng``) neither tried nor in
    ``exclude``; gives up after ``max_draws`` draws (default ``50 * n``) or when the space
    cannot sample."""
    out: list[dict] = []
    sigs = set(exclude)
    tries, limit = 0, 50 * n if max_draws is None else max_draws
    while len(out) < n and tries < limit:
        tries += 1
        try:
            c = state.space.sample(state.rng)
        except RuntimeError:
            break
        s = sig(c)
        if s not in state.tried and s not in sigs:
            out.append(c)
            sigs.add(s)
    return out


@register
class RandomFill(ProposalSource):
    """Last in every round: the places the ranking sources left (epsilon exploration, or the
    whole round when there is nothing to rank)."""

    name = origin = "random"
    after = ("guard", "surrogate", "model")   # the places the rankers left

    def propose(self, state: SearchState, rnd: Round) -> None:
        got = random_configs(state, rnd.free, rnd.sigs(), max_draws=50 * rnd.size)
        rnd.add(got, [self.origin] * len(got))
