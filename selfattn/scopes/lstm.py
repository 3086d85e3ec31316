"""scope=lstm: the recurrent baseline torch.nn.LSTM over the layer's X (selfattn/recurrent.py); no attention."""

from selfattn.scopes._recurrent import recurrent_scope

# Peak bytes of one call in units of B x n x d_model elements (the output's size), plus copies of the weights, per
# mode. Forward: the input projection of every step at once (gates units), the stacked outputs and a batch-first
# copy; fwd_bwd adds every step's gates and states kept for backward, dX and the weights' gradients. Measured on a
# CPU (torch 2.x, fp32, n 256-1024, d_model 64-256, batch 1-4, the allocator's peak): fwd 7-13 units (oneDNN's
# workspace and weight copies; the fixed part shrinks with batch and n), fwd_bwd 23-30. CUDA (cuDNN) is not measured.
UNITS = {"fwd": (8, 2), "fwd_bwd": (25, 2)}

SCOPE = recurrent_scope("lstm", gates=4, units=UNITS)
