"""Associative recall, generated from a seed: the synthetic task of scope=train.

A sequence holds `pairs` (key, value) tokens, then one query token naming one of the keys; the
answer is that key's value. Keys within a sequence are distinct, so the answer is always
determined: a model solves it exactly when the query attends to the position of its key and
copies the value found there, which is what one attention layer can learn (and what a model
without attention, seeing only the query position, cannot do better than chance 1/VALUE_VOCAB).

Each position is one token: position i < pairs carries key i and value i (the model adds their
embeddings), the last position carries the query key and a query marker. So seq_len = pairs + 1
and the task needs no positional encoding (the pairs form a set).

Batches are drawn on the host from a private torch.Generator (never the global RNG): the same
seed gives the same batches on any device and in any process, which the determinism test reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KEY_VOCAB = 64  # distinct keys; a sequence draws its pairs' keys without replacement
VALUE_VOCAB = 16  # values; chance accuracy is 1 / VALUE_VOCAB
DATA_SEED_OFFSET = 7_000_003  # the training stream's seed differs from the model's
EVAL_SEED_OFFSET = 8_000_009  # and the held-out batch's from both


@dataclass(frozen=True)
class Batch:
    keys_BP: torch.Tensor  # int64 (batch, pairs): distinct within a row
    values_BP: torch.Tensor  # int64 (batch, pairs)
    query_B: torch.Tensor  # int64 (batch,): the key asked for, one of the row's keys
    answer_B: torch.Tensor  # int64 (batch,): its value

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in (self.keys_BP, self.values_BP, self.query_B, self.answer_B)))


def pairs_for(seq_len: int) -> int:
    """Pairs in a sequence of seq_len tokens (the last is the query); ValueError naming what fits."""
    pairs = seq_len - 1
    if not 1 <= pairs <= KEY_VOCAB:
        raise ValueError(f"seq_len: scope=train holds seq_len - 1 (key, value) pairs of distinct keys, so 2 <= seq_len "
                         f"<= {KEY_VOCAB + 1}, got {seq_len}")
    return pairs


def draw(batch: int, pairs: int, generator: torch.Generator) -> Batch:
    """One batch from `generator` (on the CPU), advancing it."""
    keys = torch.rand(batch, KEY_VOCAB, generator=generator).argsort(dim=1)[:, :pairs]
    values = torch.randint(VALUE_VOCAB, (batch, pairs), generator=generator)
    asked = torch.randint(pairs, (batch, 1), generator=generator)
    return Batch(keys, values, keys.gather(1, asked)[:, 0], values.gather(1, asked)[:, 0])


def stream(seed: int) -> torch.Generator:
    """The generator of a point's training batches (one `draw` per step, in order)."""
    return torch.Generator(device="cpu").manual_seed(seed + DATA_SEED_OFFSET)


def eval_batch(batch: int, pairs: int, seed: int) -> Batch:
    """The point's held-out batch: the same for every step it is evaluated at."""
    return draw(batch, pairs, torch.Generator(device="cpu").manual_seed(seed + EVAL_SEED_OFFSET))
