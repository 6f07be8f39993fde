"""``tunedb publish SRC OUT``: a read-only, content-addressed snapshot of a store for any static
web server (see ``tunedb.transfer.migration.publish`` and docs/publishing.md); ``tunedb keygen``:
an ed25519 key pair to sign snapshots with (``--sign``) and check them by (``--publisher-key``)."""

from __future__ import annotations

from tunedb.transfer.cli.util import UserError, emit, open_location, progress_bar, progress_to, snapshot_options


def register(sub, common) -> None:
    p = sub.add_parser("publish", parents=[common],
                       help="write a read-only snapshot of a store that a static web server serves as it is")
    p.add_argument("src", metavar="SRC", help="the store to publish (a directory or URL; --also adds lower layers)")
    p.add_argument("out", metavar="OUT", help="snapshot directory (created; a snapshot there is updated in place)")
    p.add_argument("--target", action="append", default=None, metavar="T",
                   help="only this target (name or key; repeatable; default all)")
    p.add_argument("--trust", default=None, metavar="P", help="only records this trust policy trusts")
    p.add_argument("--since", default=None, metavar="SNAPSHOT",
                   help="a previous snapshot directory whose unchanged files are reused")
    p.add_argument("--publisher", default=None, metavar="NAME",
                   help="publisher name: readers see the records' source as imported:NAME (default: host name)")
    p.add_argument("--all-fields", action="store_true",
                   help="also carry the private fields session, host and origin (left out by default)")
    p.add_argument("--sign", default=None, metavar="KEYFILE", help="sign the manifest with this ed25519 private key")
    p.add_argument("--block-size", type=int, default=None, metavar="BYTES",
                   help="verified block size for range reads (default 1 MiB)")
    p.set_defaults(func=run_publish)

    k = sub.add_parser("keygen", parents=[common], help="make an ed25519 key pair for signing snapshots")
    k.add_argument("private", metavar="KEYFILE", help="private key file to create (PEM, mode 0600)")
    k.add_argument("--public", default=None, metavar="FILE", help="public key file (default KEYFILE.pub)")
    k.set_defaults(func=run_keygen)


def _source(args):
    """SRC, with the global --also layers below it (a read-only layered view)."""
    src = open_location(args.src, create=False, what="source", **snapshot_options(args, args.src))
    also = getattr(args, "also", None) or []
    if not also:
        return src
    from tunedb.index.views.layered import LayeredStore

    lower = [open_location(loc, create=False, what="lower layer", **snapshot_options(args, loc)) for loc in also]
    return LayeredStore([src, *lower], writable=None, mode=getattr(args, "layers", None) or "ordered")


def run_publish(args) -> int:
    from tunedb.index.opener import parse_location
    from tunedb.index.snapshot.format import BLOCK_SIZE
    from tunedb.transfer.migration.publish import publish

    try:
        out_loc = parse_location(args.out)
    except ValueError as e:
        raise UserError(str(e)) from None
    if not out_loc.is_local_directory:
        raise UserError(f"OUT {args.out} must be a directory on this machine (upload it to the web server after)")
    src = _source(args)
    bar = progress_bar(args, 1, "publish", unit="target")

    def progress(done: int, total: int, info: str) -> None:
        bar.total = max(total, 1)
        progress_to(bar, done, info)

    try:
        res = publish(src, out_loc.path, targets=args.target, trust=args.trust, since=args.since,
                      publisher=args.publisher, all_fields=args.all_fields, sign_key=args.sign,
                      block_size=args.block_size or BLOCK_SIZE, progress=progress)
    except ValueError as e:
        raise UserError((str(e).strip().splitlines() or ["cannot publish"])[0]) from None
    finally:
        bar.close()
        src.close()
    total = max(res["bytes_total"], 1)
    copied = f", {res['bytes_copied']} copied from --since" if res["bytes_copied"] else ""
    left_out = "run summaries" if args.all_fields else "session, host, origin, run summaries"
    human = (f"published {res['records']} records of {res['targets']} target(s) to {res['out']} as "
             f"{res['publisher']}: {res['parts']} parts, {res['files']} files, {res['bytes_total']} bytes"
             f"{', signed' if res['signed'] else ''}\n"
             f"wrote {res['bytes_written']} bytes ({100 * res['bytes_written'] / total:.1f} %) in "
             f"{res['files_written']} new file(s); reused {res['files_reused']} file(s) "
             f"({res['bytes_reused'] + res['bytes_copied']} bytes{copied})\n"
             f"left out: {left_out}")
    emit(args, res, human)
    return 0


def run_keygen(args) -> int:
    from tunedb.index.snapshot.signing import generate_keys

    public = args.public or args.private + ".pub"
    try:
        generate_keys(args.private, public)
    except ValueError as e:
        raise UserError(str(e)) from None
    emit(args, {"private": args.private, "public": public},
         f"wrote {args.private} (private: keep it; tunedb publish --sign {args.private}) and {public} "
         f"(public: give it to readers: --publisher-key {public})")
    return 0
