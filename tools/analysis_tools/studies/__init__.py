"""Reproducible studies behind the analysis tools of this folder, kept out of the installed ``mmvitreg``
package: :mod:`.claims` (``claims_report.py``, ``docs/claims.md``), :mod:`.train_step_benchmark`
(``benchmark_train_step.py``) and the diagnostics the analysis tools and the claims share
(:mod:`.attention_similarity`, :mod:`.patch_similarity`, :mod:`.tl_align_diagnostics`), and :mod:`.trace_support`
(``trace_support.py``: which trace user each backbone serves). The tools import
them as ``studies`` (a script's folder is first on ``sys.path``); the wheel carries them in
``mmvitreg/.mim/tools/analysis_tools/studies/``."""
