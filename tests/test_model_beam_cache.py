"""BeamCache, beam search's decoding state: the beams of a sentence share its source K/V and one
self-attention store; cached decoding equals the full forward per element through every reorder
beam search makes; wrong calls raise ValueError."""

import pytest
import torch
from test_model_seq2seq import VOCAB, decode_steps, random_batch, tiny_model

from mt.model import BeamCache, EncoderOut, Seq2SeqTransformer
from mt.model.attention import attention, grouped_attention
from mt.model.cache import RowMoves, row_moves, select_rows_


def copies(enc: EncoderOut, beams: int) -> EncoderOut:
    """``enc`` with each sentence's row repeated for its beams (the uncached reference's input)."""
    return EncoderOut(enc.out.repeat_interleave(beams, 0), enc.pad_mask.repeat_interleave(beams, 0))


def beam_setup(
    beams: int, lengths: list[int], steps: int
) -> tuple[Seq2SeqTransformer, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A tiny model, sources of ``lengths``, and targets of ``steps`` tokens repeated for ``beams``."""
    model = tiny_model()
    src, src_mask = random_batch(lengths)
    tgt, _ = random_batch([steps - 1] * len(lengths), bos=True)
    return model, (src, src_mask), tgt.repeat_interleave(beams, dim=0)


def test_beams_of_a_sentence_share_one_source_kv_through_reorders() -> None:
    beams = 3
    model, (src, src_mask), tgt = beam_setup(beams, [5, 9, 4], 8)  # tgt (9, T = 8)
    enc = model.encode(src, src_mask)  # one row per sentence
    full = model.decode(tgt, copies(enc, beams))  # (9, T, V), no cache: one source row per decoder row
    cache = model.new_cache(beams_per_sentence=beams)
    assert isinstance(cache, BeamCache)
    decode_steps(model, tgt, enc, cache, range(2))  # the first call may hold all K beams of each sentence
    cross_k = cache.store.layers[0].cross_k
    assert cache.beams == beams and cross_k is not None and cross_k.size(0) == 3  # once per sentence

    within = torch.tensor([2, 2, 0, 4, 3, 3, 8, 6, 7])  # each row keeps its sentence: the beams of beam search
    cache.reorder(within)
    assert cache.store.layers[0].cross_k is cross_k  # no copy of the source K/V
    step = decode_steps(model, tgt[within], enc, cache, range(2, 4))
    assert torch.allclose(step, full[within, 2:4], atol=1e-5)

    drop = torch.tensor([1, 1, 0, 8, 6, 7])  # the middle sentence finished: its rows leave
    cache.reorder(drop)
    enc.reorder(torch.tensor([0, 2]))  # the encoder output holds sentences
    rows = within[drop]
    assert cache.beams == beams and cache.sentences == 2 and cache.store.layers[0].cross_k.size(0) == 2
    # the longest source left: the steps only it read go (``narrow_source``)
    kept = int((~src_mask[[0, 2]]).sum(dim=1).max())
    assert kept < src_mask.size(1) and torch.equal(cache.store.src_pad_mask, src_mask[[0, 2], :kept])
    assert cache.store.layers[0].cross_k.size(2) == kept
    step = decode_steps(model, tgt[rows], enc, cache, range(4, 6))
    assert torch.allclose(step, full[rows, 4:6], atol=1e-5)

    across = torch.tensor([5, 0, 1])  # rows of different sentences in one sentence's beams
    with pytest.raises(ValueError, match="cannot mix sentences"):
        cache.reorder(across)


def test_fanning_one_row_per_sentence_out_to_beams_copies_no_source_kv() -> None:
    model, (src, src_mask), tgt = beam_setup(1, [5, 9], 7)  # tgt (2, T = 7)
    enc = model.encode(src, src_mask)  # one row per sentence, as beam search's step 0
    full = model.decode(tgt, enc)
    cache = model.new_cache(beams_per_sentence=4)
    decode_steps(model, tgt, enc, cache, range(1))
    cross_k = cache.store.layers[0].cross_k
    assert cache.beams == 1
    fan_out = torch.arange(2).repeat_interleave(4)  # 0 0 0 0 1 1 1 1: four beams a sentence
    cache.reorder(fan_out)
    assert cache.beams == 4 and cache.rows == 8 and cache.store.layers[0].cross_k is cross_k
    step = decode_steps(model, tgt[fan_out], enc, cache, range(1, 7))  # enc still one row per sentence
    assert torch.allclose(step, full[fan_out, 1:7], atol=1e-5)


@torch.inference_mode()
def test_beam_reorders_copy_no_stored_keys_and_dropped_sentences_are_filled_in_place() -> None:
    """Beams swapping within a sentence only change the slot table; a finished sentence's place is
    taken by the last one (beam search's order), copying that one alone; chunks of T > 1 still work."""
    beams = 4
    model, (src, src_mask), tgt = beam_setup(beams, [5, 9, 4], 9)  # tgt (12, T = 9)
    enc = model.encode(src, src_mask)
    full = model.decode(tgt, copies(enc, beams))
    cache = model.new_cache(beams_per_sentence=beams)
    decode_steps(model, tgt, enc, cache, range(3))
    keys = cache.store.layers[0].self_attn.keys
    assert keys is not None and cache.beams == beams

    within = torch.tensor([3, 3, 0, 1, 6, 4, 4, 5, 11, 11, 11, 8])
    cache.reorder(within)
    assert cache.store.layers[0].self_attn.keys is keys  # nothing copied
    step = model.decode(tgt[within, 3:5], enc, cache)  # two tokens in one call
    assert torch.allclose(step, full[within, 3:5], atol=1e-5)

    drop = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11])  # sentence 1 finished, sentence 2 takes its place
    cache.reorder(drop)
    enc.reorder(torch.tensor([0, 2]))
    rows = within[drop]
    assert cache.store.layers[0].self_attn.keys.data_ptr() == keys.data_ptr()  # filled in place
    # the longest source left: the steps only it read go (``narrow_source``)
    kept = int((~src_mask[[0, 2]]).sum(dim=1).max())
    assert kept < src_mask.size(1) and torch.equal(cache.store.src_pad_mask, src_mask[[0, 2], :kept])
    assert cache.store.layers[0].cross_k.size(2) == kept
    step = decode_steps(model, tgt[rows], enc, cache, range(5, 9))
    assert torch.allclose(step, full[rows, 5:9], atol=1e-5)


def test_the_slot_table_holds_the_slot_each_beam_reads_at_each_step() -> None:
    """Each step a beam writes its own slot (its place among the sentence's beams); a reorder gives each
    new beam its ancestor's row of the table, so it reads its ancestors' keys."""
    model, (src, src_mask), tgt = beam_setup(3, [5], 4)  # one sentence, tgt (3, T = 4)
    enc = model.encode(src, src_mask)
    cache = model.new_cache(beams_per_sentence=3)
    with torch.inference_mode():
        model.decode(tgt[:1, :1], enc, cache)  # step 0: one row
        cache.reorder(torch.tensor([0, 0, 0]))  # fan out: every beam read slot 0 at step 0
        assert cache.slots is not None and cache.slots.tolist() == [[0], [0], [0]]
        model.decode(tgt[:, 1:2], enc, cache)
        assert cache.slots.tolist() == [[0, 0], [0, 1], [0, 2]]
        cache.reorder(torch.tensor([2, 0, 0]))
        model.decode(tgt[:, 2:3], enc, cache)
    assert cache.slots.dtype == torch.int32 and cache.slots.tolist() == [[0, 2, 0], [0, 0, 1], [0, 0, 2]]


def test_one_beam_per_sentence_decodes_bit_for_bit_like_the_plain_cache() -> None:
    model, (src, src_mask), tgt = beam_setup(1, [5, 9, 4], 6)
    outputs = []
    for cache in (model.new_cache(), model.new_cache(beams_per_sentence=1)):
        enc = model.encode(src, src_mask)
        first = decode_steps(model, tgt, enc, cache, range(3))
        keep = torch.tensor([0, 2])
        cache.reorder(keep)
        enc.reorder(keep)
        outputs.append(torch.cat([first[keep], decode_steps(model, tgt[keep], enc, cache, range(3, 6))], dim=1))
    assert torch.equal(outputs[0], outputs[1])


def test_wrong_calls_raise_clear_errors() -> None:
    beams = 2
    model, (src, src_mask), tgt = beam_setup(beams, [5, 9, 4], 4)  # tgt (6, T)
    enc = model.encode(src, src_mask)
    cache = model.new_cache(beams_per_sentence=beams)
    with pytest.raises(ValueError, match="after the first decode"):
        cache.reorder(torch.arange(6))
    with pytest.raises(ValueError, match="1 or 2 rows per sentence"):
        model.decode(tgt[:5, :1], enc, cache)
    model.decode(tgt[:, :1], enc, cache)
    with pytest.raises(ValueError, match="not sentences x 2 beams"):  # 5 rows, runs of 2
        cache.reorder(torch.tensor([0, 0, 2, 2, 4]))
    with pytest.raises(ValueError, match="cannot mix sentences"):  # unequal runs: rows of sentences 0, 1
        cache.reorder(torch.tensor([0, 2, 4, 4]))
    with pytest.raises(ValueError, match="out of range"):
        cache.reorder(torch.tensor([6, 6]))
    cache.reorder(torch.tensor([0, 0, 5, 4]))  # sentence 1 finished
    with pytest.raises(ValueError, match="reorder the encoder output by sentence"):
        model.decode(tgt[[0, 0, 5, 4], 1:2], enc, cache)  # enc still holds 3 sentences
    enc.reorder(torch.tensor([0, 2]))
    assert model.decode(tgt[[0, 0, 5, 4], 1:2], enc, cache).shape == (4, 1, VOCAB)
    with pytest.raises(ValueError, match="beams_per_sentence"):
        BeamCache(2, beams_per_sentence=0)


def test_grouped_attention_equals_attention_over_repeated_keys() -> None:
    torch.manual_seed(0)
    q = torch.randn(6, 2, 3, 4)  # 2 groups of 3 rows, T = 3
    k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]  # (2, 1, 1, 5)
    expected, _ = attention(q, k.repeat_interleave(3, 0), v.repeat_interleave(3, 0), mask.repeat_interleave(3, 0))
    assert torch.allclose(grouped_attention(q, k, v, mask, group=3), expected, atol=1e-6)
    with pytest.raises(ValueError, match="group"):
        grouped_attention(q[:5], k, v, mask, group=3)
    with pytest.raises(ValueError, match="group"):
        grouped_attention(q, k, v, mask, group=2)  # the group is given, never inferred


def test_select_rows_equals_index_select() -> None:
    for index in ([0, 4, 2, 3], [0, 1, 2], [3, 3, 1, 0], [4, 3, 2, 1, 0], [0, 0, 1, 1, 2, 2]):
        store = torch.arange(5 * 3).view(5, 3).float()
        expected = store.index_select(0, torch.tensor(index))
        assert torch.equal(select_rows_(store, torch.tensor(index)), expected)
        buffer = torch.arange(5 * 2 * 3).view(5, 2, 3).float()  # (rows, H, capacity): a K/V buffer's layout
        expected = buffer.index_select(0, torch.tensor(index))
        taken = select_rows_(buffer, torch.tensor(index), steps=2)  # only the first 2 steps are valid
        assert torch.equal(taken[:, :, :2], expected[:, :, :2])


def test_row_moves_made_once_serve_every_buffer() -> None:
    """A cache computes the moved rows once per reorder and hands them to each of its buffers."""
    index = torch.tensor([0, 4, 2, 3])  # row 4 takes row 1's place (a finished sentence left)
    moves = row_moves(index, 5)
    assert isinstance(moves, RowMoves)
    assert moves.to.tolist() == [1] and moves.source.tolist() == [4]
    keys, cross = torch.arange(5 * 2 * 3).view(5, 2, 3).float(), torch.arange(5 * 7).view(5, 7).float()
    expected_keys, expected_cross = keys.index_select(0, index), cross.index_select(0, index)
    assert torch.equal(select_rows_(keys, index, 3, moves), expected_keys)
    assert torch.equal(select_rows_(cross, index, None, moves), expected_cross)
    assert row_moves(torch.tensor([4, 3, 2, 1, 0]), 5) is None  # most rows move: index_select instead
    assert row_moves(torch.tensor([0, 0, 1, 1, 2, 2]), 5) is None  # more rows than held
    store = torch.arange(5 * 3).view(5, 3).float()
    assert torch.equal(select_rows_(store, torch.tensor([4, 3, 2, 1, 0]), None, None), store.flip(0))
