"""Masks and score modifications as functions, in the field's convention (torch's flex_attention, attention-gym).

    mask_mod(b, h, q_idx, kv_idx) -> bool            score_mod(score, b, h, q_idx, kv_idx) -> score

q_idx is the query's position, bottom-right aligned (row i of q_len rows over seq_len keys: i + seq_len - q_len),
which is flex_attention's q_idx when q_len == seq_len (selfattn/mods/contract.py says what a top-left function
needs). `contract.py`: the convention and a declaration (`declare_mod`); `catalogue.py`: the built-ins;
`discovery.py`: names (built-ins, entry points `selfattn.masks` / `selfattn.score_mods`, paths module:function);
`geometry.py`: the mask on tensors, its block map and pair counts; `dense.py` and `blocks.py`: the materialized
and the block-sparse computation the built-in back ends run them with; `python -m selfattn.mods` lists them.
"""

from selfattn.mods.contract import BoundMod, ModDeclaration, ModSpec, Param, declare_mod, from_callable

__all__ = ["BoundMod", "ModDeclaration", "ModSpec", "Param", "declare_mod", "from_callable"]
