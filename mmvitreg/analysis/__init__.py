"""What the backbones' token traces serve, checked for every trace user (:mod:`.trace_support`); the
diagnostics behind the other analysis tools live beside them, in ``tools/analysis_tools/studies/``."""
