"""Reproducible studies behind the analysis tools of this folder, kept out of the installed ``mmvitreg``
package: :mod:`.claims` (``claims_report.py``, ``docs/claims.md``) and :mod:`.train_step_benchmark`
(``benchmark_train_step.py``). The tools import them as ``studies`` (a script's folder is first on
``sys.path``); the wheel carries them in ``mmvitreg/.mim/tools/analysis_tools/studies/``."""
