"""The `lagd` command: run the daemon, check a config, migrate, decode, demo, run jobs.

Exit status: 0 success, 1 runtime failure, 2 bad usage or bad configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from lagd import __version__
from lagd.core.config import ConfigError, Settings, load

DEFAULT_CONFIG = os.environ.get("LAGD_CONFIG", "/etc/lagd/lagd.toml")


def _load_or_exit(path: str) -> Settings:
    try:
        return load(path)
    except ConfigError as exc:
        print(f"lagd: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _runtime_error(exc: OSError, settings: Settings, config: str) -> str:
    """One line for an operating-system failure at start: what failed and what to do next."""
    listen = settings.http.listen
    if exc.errno == errno.EADDRINUSE:
        return f"http.listen {listen} is in use: stop the other process or set http.listen to a free host:port"
    if exc.errno == errno.EACCES and "listen" in str(exc):
        return f"http.listen {listen} is not allowed (ports below 1024 need privileges): set http.listen to a port above 1023"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"http.listen {listen}: no such address on this machine: set http.listen to a local address"
    what = (exc.strerror or str(exc) or exc.__class__.__name__).splitlines()[0]
    return (
        f"cannot start: {exc.__class__.__name__}: {what}; check the files and addresses in {config} "
        f"(lagd check-config {config}) and start lagd again"
    )


def load_daemon() -> Callable[..., Coroutine[Any, Any, int]]:
    """Import the daemon (lagd.daemon.run) with the collector kept off its libraries.

    Loading SQLAlchemy, aiohttp, aiokafka and structlog allocates a few hundred thousand objects
    that live as long as the process. Collected while they load, they took a tenth of the
    start-up (about 60 ms); left young, the first young collection after it traversed them all
    (a 52 ms pause before the first record). Frozen (gc.freeze), no collection visits them.
    """
    gc.disable()
    try:
        from lagd.daemon import run
    finally:
        gc.freeze()
        gc.enable()
    return run


def _config_path(args: argparse.Namespace, command: str) -> str | None:
    """The settings file given as `FILE` or `--config FILE` (either serves); None if both, differing."""
    if args.file and args.config and args.file != args.config:
        print(f"lagd: {command} got two files ({args.file} and --config {args.config}); pass one", file=sys.stderr)
        return None
    return str(args.file or args.config or DEFAULT_CONFIG)


def _cmd_run(args: argparse.Namespace) -> int:
    path = _config_path(args, "run")
    if path is None:
        return 2
    args.config = path
    settings = _load_or_exit(args.config)
    from lagd.runtime import logs

    logs.configure(settings.log.level, settings.log.format)
    # From here on every line is a log event (one JSON object in the JSON format), failures too.
    log = logs.get("lagd")
    if settings.scale.workers > 1:
        # The supervisor only starts and watches the workers: it never loads the daemon (its
        # SQLAlchemy, aiohttp, aiokafka and compiled modules), which would cost it the RSS of one
        # more lagd (measured: 75 MB peak with them, against about 30 MB without).
        from lagd.scale.processes import supervise

        return asyncio.run(supervise(settings, args.config, migrate=args.migrate))
    run = load_daemon()
    from lagd.runtime import collector

    collector.tune()
    try:
        return asyncio.run(run(settings, migrate=args.migrate, config_path=args.config))
    except OSError as exc:  # the operator needs the reason and the fix, not a traceback
        log.error(_runtime_error(exc, settings, args.config))
        return 1
    except Exception:
        log.exception("lagd failed unexpectedly: please report this with the exception")
        return 1


def _cmd_check_config(args: argparse.Namespace) -> int:
    path = _config_path(args, "check-config")
    if path is None:
        return 2
    settings = _load_or_exit(path)
    names = ", ".join(settings.clusters)
    print(f"{path}: OK ({len(settings.clusters)} cluster(s): {names}; {len(settings.mirrors)} mirror(s))")
    return 0


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    settings = _load_or_exit(args.config)
    from lagd.db.migrate import migration_summary, upgrade

    try:
        before, after = upgrade(settings.storage.database_url.reveal(), args.revision)
    except Exception as exc:  # the operator needs the reason, not a traceback
        print(f"lagd: database upgrade failed: {exc.__class__.__name__}: {exc}".splitlines()[0], file=sys.stderr)
        print("check storage.database-url and that the database exists and accepts connections", file=sys.stderr)
        return 1
    print(migration_summary(before, after))
    return 0


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"lagd {__version__}")
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    from lagd.ingest.decode_cmd import run as decode_run

    return decode_run(sys.stdin, sys.stdout)


def _cmd_demo(args: argparse.Namespace) -> int:
    from lagd.demo import main as demo_main

    return demo_main(args)


def _cmd_replay(args: argparse.Namespace) -> int:
    from lagd.replay import run as replay_run

    return replay_run(args)


def _cmd_jobs(args: argparse.Namespace) -> int:
    settings = _load_or_exit(args.config)
    import importlib.util

    from lagd.runtime import logs

    logs.configure(settings.log.level, settings.log.format)  # as `lagd run`: [log] format and level

    if importlib.util.find_spec("pyspark") is None:
        print(
            "lagd: the Spark jobs need PySpark, which is not installed here: "
            "pip install 'lagd[jobs]' (from a checkout: pip install -e '.[jobs]')",
            file=sys.stderr,
        )
        return 2
    if args.job == "trends":
        from lagd.jobs.trends import main as trends_main

        return trends_main(settings, args)
    if args.job == "mirror-trends":
        from lagd.jobs.mirror_trends import main as mirror_trends_main

        return mirror_trends_main(settings, args)
    from lagd.jobs.mirrors import main as mirrors_main

    return mirrors_main(settings, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lagd",
        description="Kafka consumer-lag evaluator: judges every consumer group over a sliding window of its "
        "commits (lagd's rules by default, or Burrow's exactly), behind Burrow's HTTP API.",
    )
    parser.add_argument("--version", "-V", action="version", version=f"lagd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run the daemon", description="Run the lagd daemon in the foreground.")
    p.add_argument("file", nargs="?", default=None, help=f"TOML settings file (default {DEFAULT_CONFIG})")
    p.add_argument("--config", "-c", default=None, metavar="FILE", help="the same (systemd's unit passes it so)")
    p.add_argument(
        "--no-migrate",
        dest="migrate",
        action="store_false",
        help="do not migrate the database to the newest schema at start",
    )
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "check-config",
        help="validate a settings file",
        description="Validate a settings file (and LAGD_* overrides); exit 2 naming the bad key.",
    )
    p.add_argument("file", nargs="?", default=None, help=f"TOML settings file (default {DEFAULT_CONFIG})")
    p.add_argument("--config", "-c", default=None, metavar="FILE", help="the same, as lagd run takes it")
    p.set_defaults(func=_cmd_check_config)

    p = sub.add_parser("db", help="database maintenance", description="Database maintenance.")
    dbsub = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = dbsub.add_parser(
        "upgrade",
        help="migrate the database schema (Alembic) to the newest revision",
        description="Migrate the database named by storage.database-url to REVISION (default head).",
    )
    up.add_argument("--config", "-c", default=DEFAULT_CONFIG)
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(func=_cmd_db_upgrade)

    p = sub.add_parser("version", help="print the version", description="Print lagd's version.")
    p.set_defaults(func=_cmd_version)

    p = sub.add_parser(
        "decode",
        help="decode __consumer_offsets records (JSON lines on stdin)",
        description='Read JSON lines {"key": "<hex>", "value": "<hex>"|null} on stdin; write one JSON object per '
        'line with the decoded record, or {"error": ...} for a record that cannot be decoded.',
    )
    p.set_defaults(func=_cmd_decode)

    p = sub.add_parser(
        "demo",
        help="run lagd against embedded Kafka, Postgres and MQTT with simulated groups",
        description="Start an embedded broker, database and MQTT broker, simulate consumer groups in "
        "every state, run lagd on them and show a live table. Ctrl-C stops everything.",
    )
    p.add_argument("--config", "-c", default=None, help="settings file (default: config/demo.toml)")
    p.add_argument(
        "--duration", type=float, default=0.0, help="stop after this many seconds (default: run until Ctrl-C)"
    )
    p.add_argument("--no-table", dest="table", action="store_false", help="do not draw the live table")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "replay",
        help="judge a recorded trace (or stored history) offline and print every group status change",
        description="Run lagd's own state and evaluator over a trace and print one JSON line per group status "
        'change. A trace line is {"ts": MS, "type": "log_end", "cluster", "topic", "partition", "offset"} or '
        '{"ts": MS, "type": "commit", "cluster", "group", "topic", "partition", "offset"}; blank and # lines are '
        "skipped. Time comes from the trace only. Lines must come in ascending ts; a line may be at most "
        "1000 ms older than the newest before it. A malformed line exits 2 naming it.",
    )
    p.add_argument("traces", nargs="*", metavar="TRACE", help='JSON-lines files read in turn (default, or "-": stdin)')
    p.add_argument(
        "--config",
        "-c",
        default=None,
        metavar="FILE",
        help="evaluator and storage keys (default: the built-in defaults)",
    )
    p.add_argument(
        "--every", type=float, default=1.0, metavar="SECONDS", help="trace time between evaluations (default 1)"
    )
    p.add_argument("--from-db", action="store_true", help="replay the commit and log-end history kept in Postgres")
    p.add_argument("--cluster", default=None, metavar="C", help="with --from-db: only this cluster")
    p.add_argument("--group", default=None, metavar="G", help="with --from-db: only this group")
    p.add_argument("--from", dest="start", metavar="T", help="with --from-db: range start (ISO time or epoch ms)")
    p.add_argument("--to", dest="end", metavar="T", help="with --from-db: range end, included (ISO time or epoch ms)")
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser(
        "jobs", help="run a Spark job (trends, mirrors, mirror-trends)", description="Run a PySpark job once."
    )
    p.add_argument("job", choices=["trends", "mirrors", "mirror-trends"])
    p.add_argument("--config", "-c", default=DEFAULT_CONFIG)
    p.add_argument(
        "--from",
        dest="start",
        default=None,
        help="range start (ISO time or epoch ms): trends and mirror-trends backfill from then; mirrors judges "
        "[--from, --to) instead of each mirror's trailing window",
    )
    p.add_argument("--to", dest="end", default=None, help="range end (ISO time or epoch ms; default now)")
    p.add_argument("--master", default=None, help="Spark master URL (default: jobs.spark-master)")
    p.set_defaults(func=_cmd_jobs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
