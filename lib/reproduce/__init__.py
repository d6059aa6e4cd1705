"""Reproducing the paper's figures: the layer between the CLI and ``train``/``launch``/``plan``/``sim``.

``--mode sim`` evaluates points with ``hipress.sim`` (SeCoPa handed over by ``planner``);
``--mode real`` measures them with the real engine on the emulated cluster (``runner``), each system
mapped onto ``hipress run`` options (``mapping``), sized by ``experiments/sosp21/real.toml``
(``settings``), and reports ratios comparable with the paper (``report``).
"""

from .mapping import RunSpec, run_spec
from .planner import sosp21_planner
from .runner import DEFAULT_PREFIX, Interrupted, RealCache, RealRunner, RealRunnerError
from .settings import RealSettings, SettingsError, load_settings

__all__ = ["DEFAULT_PREFIX", "Interrupted", "RealCache", "RealRunner", "RealRunnerError", "RealSettings", "RunSpec",
           "SettingsError", "load_settings", "run_spec", "sosp21_planner"]
