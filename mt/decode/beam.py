"""Beam search over (sentences x beams) as one tensor program, with a KV cache.

Layout: the B' sentences still being decoded each own K consecutive rows, so every per-row tensor is
(B'*K, ...) and row ``i * K + k`` is beam k of active sentence i. One step:

1. ``model.decode`` the last token of every row with the cache -> logits (B'*K, V); log-probs are
   the float32 ``log_softmax`` over all ids, PAD/BOS banned afterwards, EOS banned before
   ``min_len`` pieces, only EOS allowed once a sentence reaches its maximum length.
2. Candidates: cumulative log-prob of each beam plus each next token, (B', K*V); keep the best 2K
   (computed from each beam's own best 2K tokens, which hold them all).
   At step 0 the K beams would all be the same ``[BOS]`` prefix, so step 0 decodes one row per
   sentence and its best K non-EOS candidates become the K beams (rows are then K per sentence).
3. EOS candidates among the top K become finished hypotheses (an EOS ranked below K would not have
   entered the beam either); the live beam is the best K candidates that are *not* EOS. A beam has
   at most K EOS candidates (one per beam), so the 2K candidates always hold K live ones: finished
   hypotheses never starve the beam (fairseq's ``cand_size = 2 * beam``).
4. Sentences that are done leave the batch (the encoder output, one row per sentence, drops them);
   one index (surviving sentences x parent beams) reorders the token history and, in exactly one
   place, the decoder cache, a ``BeamCache`` (``mt.model.beam_cache``: the beams of a sentence share
   its source K/V and one self-attention store, so that reorder moves few keys).
5. With ``live`` (continuous batching, ``mt.decode.refill``), the next sentences then join in the freed
   places at their own step 0 (``model.join``): K rows each, all ``[BOS]``, only the first one alive
   (the others' scores are -inf), which is what step 0's one row a sentence does. Length limits and
   stopping count each sentence's own steps.

Scores: ``score = logprob / lp(|Y|)`` with |Y| = pieces + EOS (``mt.decode.length_penalty``). When a
sentence is done: ``mt.decode.stopping`` (``cfg.stopping``: ``topk_eos``, the default, also stops when
the best candidate is EOS; ``exact`` only when no live beam can still beat the n-best under the
penalised score; ``fairseq``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.config import DecodeConfig
from mt.decode.common import (
    BOS_ID,
    EOS_ID,
    NEG_INF,
    PAD_ID,
    DecodableModel,
    Hypothesis,
    ban_,
    ban_eos_,
    fill_from_the_end,
    force_eos_,
    force_first_,
    forced_ids,
    forced_limits,
    forced_tokens,
    max_output_lengths,
    min_output_lengths,
    rows_below,
    start_tokens,
    topk_rows,
)
from mt.decode.length_penalty import check_penalty
from mt.decode.refill import EncodedRows, SentenceQueue, SentencesDone, first_beam_only, joining_tokens
from mt.decode.stopping import Finished


def _select_candidates(
    scores: Tensor,
    logits: Tensor,
    beam: int,
    vocab_size: int | None,
    at_limit: Tensor | None,
    too_short: Tensor | None,
    forced: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Top 2K continuations per sentence.

    scores (B', r) cumulative log-probs of each sentence's r rows (r = 1 at step 0, else K), logits
    (B'*r, V) of the step, at_limit (B'*r,) bool rows that may only end, too_short (B'*r,) bool rows
    that may not end yet, forced (B'*r,) the token a row must produce (-1: any; ``force_first_``) (each or
    None) -> (cand_scores, cand_row, cand_tok), each (B', 2K), best first; cand_row in [0, r).

    Every one of a sentence's top 2K candidates is among its own row's top 2K tokens, so each row is
    cut to its top 2K first (``topk_rows``): the final top-k runs over 2K*r values instead of r*V.
    """
    n, rows = scores.shape
    lprobs = ban_(F.log_softmax(logits.float(), dim=-1), vocab_size)  # (B'*r, V), normalised over every id
    if at_limit is not None:
        force_eos_(lprobs, at_limit)
    if too_short is not None:
        ban_eos_(lprobs, too_short)
    if forced is not None:
        force_first_(lprobs, forced)
    k2 = min(2 * beam, lprobs.size(-1))
    top_lprobs, top_tok = topk_rows(lprobs, k2)  # (B'*r, 2K)
    cand = (scores.view(-1, 1) + top_lprobs).view(n, rows * k2)  # (B', r*2K)
    cand_tok = top_tok.view(n, rows * k2)
    if rows * k2 < 2 * beam:  # a vocabulary smaller than 2K: the missing candidates are dead ones
        cand = F.pad(cand, (0, 2 * beam - rows * k2), value=NEG_INF)
        cand_tok = F.pad(cand_tok, (0, 2 * beam - rows * k2), value=PAD_ID)
    cand_scores, pos = cand.topk(2 * beam, dim=1)  # (B', 2K)
    return cand_scores, (pos // k2).clamp_(max=rows - 1), cand_tok.gather(1, pos)


def _live_positions(cand_tok: Tensor, beam: int) -> Tensor:
    """Positions (B', K) of the best K non-EOS candidates, in rank order (EOS pushed past the end)."""
    n_cand = cand_tok.size(1)
    rank = torch.arange(n_cand, device=cand_tok.device) + (cand_tok == EOS_ID).long() * n_cand  # (B', 2K)
    return rank.topk(beam, dim=1, largest=False).indices  # (B', K)


def _finalize(
    finished: Finished,
    active: list[int],
    born: list[int],
    origin: int,
    tokens: Tensor,
    cand_scores: Tensor,
    cand_beam: Tensor,
    cand_tok: Tensor,
    beam: int,
    rows: int,
) -> None:
    """Turn finite EOS candidates among the top K into finished hypotheses (best first); a sentence's
    history starts after its BOS, in column ``born - origin`` of ``tokens``."""
    top_eos = (cand_tok[:, :beam] == EOS_ID) & cand_scores[:, :beam].isfinite()  # (B', K)
    if not bool(top_eos.any()):
        return
    sent, pos = top_eos.nonzero(as_tuple=True)  # rank order within each sentence
    parents = sent * rows + cand_beam[sent, pos]  # rows: 1 or K a sentence
    histories = tokens.index_select(0, parents).tolist()
    for i, history, logprob in zip(sent.tolist(), histories, cand_scores[sent, pos].tolist(), strict=True):
        finished.add(active[i], history[born[i] - origin + 1 :], logprob)


@torch.inference_mode()
def beam_search(
    model: DecodableModel,
    src: Tensor,
    src_pad_mask: Tensor,
    cfg: DecodeConfig,
    *,
    max_positions: int | None = None,
    vocab_size: int | None = None,
    live: list[int] | None = None,
    on_done: SentencesDone | None = None,
    forced: Sequence[int | None] | None = None,
) -> list[list[Hypothesis]]:
    """n-best lists (best first, ``cfg.nbest`` each) for src (B, S) with src_pad_mask (B, S).

    Uses ``cfg.beam_size``, ``nbest``, ``length_penalty``, ``alpha``, ``max_len_a``, ``max_len_b``,
    ``min_len``, ``stopping``; ``max_positions`` (the model's position limit) caps the output length;
    ids ``>= vocab_size`` (the tokenizer's size) are never generated. The algorithm: the module
    docstring; the stopping rules: ``mt.decode.stopping``. ``live`` (continuous batching,
    ``mt.decode.refill``): sentence i joins the decoding once fewer than ``live[i]`` are being decoded;
    ``on_done`` hears sentences' n-best lists as soon as they are final. ``forced``: each sentence's forced first
    token or None (``mt.decode.common``: its step 0 has one candidate, which the C++ loop does not take).
    """
    check_penalty(cfg.length_penalty)
    if not 1 <= cfg.nbest <= cfg.beam_size:
        raise ValueError(f"need 1 <= nbest <= beam_size, got nbest={cfg.nbest}, beam_size={cfg.beam_size}")
    max_len = max_output_lengths(src_pad_mask, cfg.max_len_a, cfg.max_len_b, max_positions)
    max_len, min_len = forced_limits(max_len, min_output_lengths(cfg.min_len, max_len), forced, max_positions)
    finished = Finished(
        max_len, min_len, beam=cfg.beam_size, nbest=cfg.nbest, penalty=cfg.length_penalty, alpha=cfg.alpha,
        stopping=cfg.stopping, forced=forced,
    )
    queue = SentenceQueue(src, src_pad_mask, live)
    while queue:
        active = queue.take(0)
        enc = queue.encoded(model.encode, active)  # (B', S, D): one row per sentence, throughout
        if _decode_native(model, enc, active, finished, cfg, vocab_size, on_done):
            continue
        _decode_beams(model, queue, active, enc, finished, cfg.beam_size, vocab_size, on_done)
    return [finished.nbest(s) for s in range(src.size(0))]


PENALTY_CODES = {"none": 0, "gnmt": 1, "length": 2}  # the C++ search's numbers (``native_search.cpp``)
STOPPING_CODES = {"exact": 0, "topk_eos": 1, "fairseq": 2}


def _decode_native(
    model: DecodableModel, enc: EncodedRows, active: list[int], finished: Finished, cfg: DecodeConfig,
    vocab_size: int | None, on_done: SentencesDone | None,
) -> bool:
    """Beam search of ``active`` (encoded as ``enc``) whole in the model's C++ loop, this module's algorithm
    without refill; False (nothing done) where the model has none or it does not take them."""
    search = getattr(model, "native_beam", None)
    if search is None:
        return False
    found = search(
        enc, [finished.max_len[s] for s in active], [finished.min_len[s] for s in active], vocab_size,
        (PAD_ID, BOS_ID, EOS_ID), cfg.beam_size, cfg.nbest, PENALTY_CODES[cfg.length_penalty], cfg.alpha,
        STOPPING_CODES[cfg.stopping], forced_ids(finished.forced, active),
    )
    if found is None:
        return False
    for sent, hypotheses in zip(active, found, strict=True):
        for tokens, logprob in hypotheses:  # in the order they finished, as the Python loop adds them
            finished.add(sent, tokens, logprob)
    if on_done is not None:
        on_done([(s, finished.nbest(s)) for s in active])
    return True


def _length_masks(
    finished: Finished, active: list[int], steps: list[int], rows: int, device: torch.device
) -> tuple[Tensor | None, Tensor | None]:
    """(B'*r,) bool: the rows that may only end (their sentence's ``steps`` entry reached its max_len), and
    those that may not end yet (below its min_len); each None when there is none."""
    ending = [n >= finished.max_len[s] for s, n in zip(active, steps, strict=True)]
    at_limit = torch.tensor(ending, device=device).repeat_interleave(rows) if any(ending) else None
    return at_limit, rows_below(steps, [finished.min_len[s] for s in active], rows, device)


def _forced_rows(finished: Finished, active: list[int], steps: list[int], rows: int, device: torch.device
                 ) -> Tensor | None:
    """(B'*r,) the forced first token of each row whose sentence is at its own step 0 (-1 for the others), or None
    when no row has one."""
    if 0 not in steps or not finished.forces([s for s, n in zip(active, steps, strict=True) if n == 0]):
        return None
    first = forced_tokens(finished.forced, active, device).masked_fill(torch.tensor(steps, device=device) != 0, -1)
    return first.repeat_interleave(rows)  # (B'*r,)


def _decode_beams(
    model: DecodableModel, queue: SentenceQueue, active: list[int], enc: EncodedRows, finished: Finished, beam: int,
    vocab_size: int | None, on_done: SentencesDone | None,
) -> None:
    """Beam search of ``active`` (the sentence of each group of rows, taken from ``queue``, encoded as ``enc``)
    until every sentence taken is done; more sentences join from ``queue`` as others leave."""
    device = queue.src.device
    born = [0] * len(active)  # the step each sentence started at
    origin = 0  # the step of ``tokens``' first column (a sentence's BOS is in column born - origin)
    cache = model.new_cache(beams_per_sentence=beam)  # step 0 decodes one row per sentence, then K
    tokens = start_tokens(len(active), device)  # (B'*r, t + 1) with BOS first; r = rows per sentence
    scores = torch.zeros(len(active), 1, device=device)  # (B', r): at step 0 the K beams would be copies

    for step in itertools.count():
        rows = scores.size(1)  # 1 at step 0, K after
        logits = model.decode(tokens[:, -1:], enc, cache)[:, -1, :]  # (B'*r, V)
        steps = [step - b for b in born]  # each sentence's own step
        at_limit, too_short = _length_masks(finished, active, steps, rows, device)
        forced = _forced_rows(finished, active, steps, rows, device)
        cand_scores, cand_beam, cand_tok = _select_candidates(
            scores, logits, beam, vocab_size, at_limit, too_short, forced
        )
        _finalize(finished, active, born, origin, tokens, cand_scores, cand_beam, cand_tok, beam, rows)

        live = _live_positions(cand_tok, beam)  # (B', K)
        scores = cand_scores.gather(1, live)  # (B', K), sorted best first
        parents = cand_beam.gather(1, live) + torch.arange(len(active), device=device).unsqueeze(1) * rows
        new_tok = cand_tok.gather(1, live)  # (B', K)

        best_live = scores[:, 0].tolist()  # the beam is sorted: its first entry bounds the others
        top_is_eos = (cand_tok[:, 0] == EOS_ID).tolist()  # (B',) the best candidate ended the sentence
        done = [
            finished.is_done(s, n, best, eos)
            for s, n, best, eos in zip(active, steps, best_live, top_is_eos, strict=True)
        ]
        if on_done is not None and any(done):
            on_done([(s, finished.nbest(s)) for s, d in zip(active, done, strict=True) if d])
        if all(done):
            return
        if any(done):  # finished sentences leave the batch, the last ones move into their places
            kept = fill_from_the_end(done)
            keep = torch.tensor(kept, device=device)  # (B'',)
            active, born = [active[i] for i in kept], [born[i] for i in kept]
            scores, parents, new_tok = scores[keep], parents[keep], new_tok[keep]
            enc.reorder(keep)  # the encoder output holds sentences, not beams
        index = parents.view(-1)  # (B''*K,) rows of the current batch to continue from
        cache.reorder(index)  # the one place the cache follows the beams
        tokens = torch.cat([tokens.index_select(0, index), new_tok.view(-1, 1)], dim=1)  # (B''*K, t + 2)
        joining = queue.take(len(active)) if queue.wants(len(active)) else []
        if joining:  # continuous batching: new sentences take the places of those that left
            model.join(enc, cache, queue.encoded(model.encode, joining))
            tokens, origin = tokens[:, min(born) - origin :], min(born)  # columns no sentence reads go
            active, born = active + joining, born + [step + 1] * len(joining)
            tokens = torch.cat([tokens, joining_tokens(len(joining) * beam, tokens.size(1), device)])
            scores = torch.cat([scores, first_beam_only(len(joining), beam, device)])
