"""scope=gru: the recurrent baseline torch.nn.GRU over the layer's X (selfattn/recurrent.py); no attention."""

from selfattn.scopes._recurrent import recurrent_scope

# Peak bytes of one call in units of B x n x d_model elements, plus copies of the weights, per mode (as lstm.py's).
# Measured on a CPU (torch 2.x, fp32, n 256-1024, d_model 64-256, batch 1-4): fwd 5, fwd_bwd 11-12.5.
UNITS = {"fwd": (5, 0), "fwd_bwd": (11.5, 1)}

SCOPE = recurrent_scope("gru", gates=3, units=UNITS)
