"""`railab destroy LAB|--all`: remove everything a lab made, found by the lab's name."""
from __future__ import annotations

from dataplane.errors import RuntimeStateError
from dataplane.runtime import lifecycle


def register(sub) -> None:
    p = sub.add_parser("destroy", help="destroy a deployed lab")
    p.add_argument("lab", nargs="?", help="lab name (the file's name: field)")
    p.add_argument("--all", action="store_true", help="destroy every railab lab on this machine")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.all == bool(args.lab):
        raise RuntimeStateError("destroy: name one lab or give --all")
    if args.all:
        removed = lifecycle.destroy_all()
        print(f"destroyed: {', '.join(removed)}" if removed else "no railab lab was deployed; nothing to do")
        return 0
    if lifecycle.destroy(args.lab):
        print(f"lab {args.lab} destroyed")
    else:
        print(f"lab {args.lab} is not deployed; nothing to do")
    return 0
