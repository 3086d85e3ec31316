"""scope=core: the attention call itself on given Q, K, V (selfattn.attention's contract)."""

from selfattn.scopes.declaration import Scope

SCOPE = Scope("core", "Q, K, V given", gives_qkv=True, pos_encodings=("none", "rope"))
