"""scope=train: one point is one short, seeded training run of a tiny attention model.

task.py (associative recall from a seed), model.py (embeddings, one harness attention layer, an
MLP, a readout), loop.py (the run: precision, loss scaling, metrics, the loss curve). The
measurement entry point is `selfattn.train.loop.train_point`, called by selfattn/measure/run.py.
Nothing here is imported by `import selfattn.train` itself (the package stays free of torch until used).
"""
