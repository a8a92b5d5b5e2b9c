"""`visdep store compact PATH`: the durable store's housekeeping (`model_adapters.compaction`, docs/durability.md)."""

from __future__ import annotations

import argparse

from model_adapters.compaction import compact, store_folders


def register(sub: argparse._SubParsersAction) -> None:
    store = sub.add_parser("store", help="the durable store of --use_cache: housekeeping")
    commands = store.add_subparsers(dest="store_command", metavar="STORE_COMMAND", required=True)
    p = commands.add_parser("compact", help="merge each model's record files into one, atomically; files being "
                                            "written are left as they are",
                            description="PATH: lmms-eval's --use_cache folder, its visdep/ folder, or one model's "
                                        "folder. Safe while runs read and write the store.")
    p.add_argument("path", metavar="PATH")
    p.set_defaults(func=_compact)


def _compact(args) -> int:
    for folder in store_folders(args.path):
        done = compact(folder)
        if done.path is None:
            print(f"{folder}: nothing to merge ({done.left} record file(s) being written, empty, or alone)")
        else:
            print(f"{folder}: {done.merged} files merged into {done.path.name} ({done.records} records); "
                  f"{done.left} left (being written, or empty)")
    return 0
