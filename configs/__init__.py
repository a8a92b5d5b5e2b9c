"""Installed as `lmms_eval_tasks.configs` (setup.py maps this folder there): the shipped panels and example specs,
which `lmms_eval_tasks.shipped` finds by name."""
