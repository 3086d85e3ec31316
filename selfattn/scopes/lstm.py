"""scope=lstm: the recurrent baseline torch.nn.LSTM over the layer's X (selfattn/recurrent.py); no attention."""

from selfattn.scopes.declaration import Scope

SCOPE = Scope("lstm", "a recurrent baseline", attention=False, gates=4, path_length=True, one_thread_on_cpu=True)
