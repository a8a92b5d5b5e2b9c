"""Packages: the three top-level ones, and `configs/` (panels, example specs) installed as `lmms_eval_tasks.configs`
so that an installed visdep finds `--panel paper` and `--spec mmau_cap` by name (`lmms_eval_tasks.shipped`).
Everything else is in pyproject.toml; pyproject's `packages.find` cannot add a package from another folder."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["lmms_eval_tasks*", "model_adapters*", "visdep_metrics*"]),
                "lmms_eval_tasks.configs"],
      package_dir={"lmms_eval_tasks.configs": "configs"})
