"""scope=gru: the recurrent baseline torch.nn.GRU over the layer's X (selfattn/recurrent.py); no attention."""

from selfattn.scopes.declaration import Scope

SCOPE = Scope("gru", "a recurrent baseline", attention=False, gates=3, path_length=True, one_thread_on_cpu=True)
