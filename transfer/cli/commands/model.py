"""Model command: tune-model (every operator task of a model through the DB)."""

from __future__ import annotations

from tunedb.transfer.cli.commands.store import TRUST_HELP, trusted
from tunedb.transfer.cli.util import (
    UserError,
    emit,
    fmt_seconds,
    machine_line,
    open_db,
    progress_bar,
    progress_to,
    table_text,
    target_arg,
)

MODEL_HELP = ("a shipped model (resnet18, resnet34, mobilenet_v2, bert_block_256, bert_block_512; NAME@SIZE for "
              "another input resolution or sequence length, e.g. resnet18@64) or a JSON task file")


def register(sub, common) -> None:
    p = sub.add_parser("tune-model", parents=[common],
                       help="tune a model's operator tasks: hits reused, similar ones warm-started, budget shared")
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", required=True, help="a local preset of this machine (see 'tunedb targets')")
    p.add_argument("--budget", type=int, default=40,
                   help="search evaluations over the tasks to tune (default 40; the default-config reference is extra)")
    p.add_argument("--cold", action="store_true",
                   help="no reuse, no seeds, no prior model: the comparison baseline (each task starts from its default)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the search (default 0): the same seed and history repeat the same run")
    p.add_argument("--round", type=int, default=2, help="evaluations per scheduler round (default 2)")
    p.add_argument("--confirm", type=int, default=2, metavar="K",
                   help="re-measure each task's K best configs interleaved before declaring a winner (0: off)")
    p.add_argument("--label", default="", help="a tag stored with the run summary (default warm/cold)")
    p.add_argument("--trust", metavar="PATTERNS", help=TRUST_HELP)
    p.set_defaults(func=run_tune_model)


def load_model_arg(spec: str):
    from tunedb.datasets.models import load_model

    try:
        return load_model(spec)
    except (ValueError, OSError) as e:
        raise UserError(str(e).splitlines()[0]) from None


def run_tune_model(args) -> int:
    from tunedb.transfer.apps.tune_model import ModelInterrupted, ModelOptions, tune_model

    if args.budget < 1:
        raise UserError("--budget must be >= 1")
    if args.round < 1:
        raise UserError("--round must be >= 1")
    if args.confirm < 0:
        raise UserError("--confirm must be >= 0")
    model = load_model_arg(args.model)
    db = trusted(args, lambda: open_db(args))
    target = target_arg(args.target, db)
    opts = ModelOptions(budget=args.budget, cold=args.cold, seed=args.seed, round=args.round,
                        confirm_top=args.confirm, label=args.label)
    bar = progress_bar(args, args.budget, f"{model.name} on {target.get('name', '')}", unit="eval")

    def cb(ev: dict) -> None:
        lat = fmt_seconds(ev["latency"]) if ev["latency"] is not None else "-"
        progress_to(bar, min(ev["evaluations"], args.budget), f"latency {lat}  {ev['task'] or ''} {ev['source'] or ''}")

    interrupted = False
    try:
        out = tune_model(db, model, target, options=opts, progress=cb)
    except ModelInterrupted as e:
        out, interrupted = e.summary, True
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    finally:
        bar.close()
    emit(args, out, human_summary(out))
    return 130 if interrupted else 0


def _est_cell(d: dict | None, fallback: float | None) -> str:
    """A table cell for a cost: the estimate with its interval's half-width and n."""
    from tunedb.index.model.estimate import CostEstimate

    if not d:
        return fmt_seconds(fallback)
    e = CostEstimate.from_dict(d)
    from tunedb.index.model.estimate import LEVEL, ci_label

    pm = f" ±{e.rel_halfwidth * 100:.0f}%" if e.has_interval else ""
    if e.has_interval and e.coverage < LEVEL - 1e-9:
        pm += f" ({ci_label(e.coverage)})"
    return f"{fmt_seconds(e.value)}{pm} n={e.records}" + (" noisy" if e.noisy else "")


def _choice(t: dict) -> str:
    if t.get("chosen"):  # the task's one answer and why (tune_model.task_answer)
        return {"tuned": "tuned: ", "stored": "stored best: "}.get(t.get("choice") or "", "") + t["chosen"]
    v = t.get("versus_default") or {}
    c = t.get("choice") or ""
    if c == "default" and v:
        return f"default kept ({v.get('verdict')})"
    if c == "tuned" and v:
        return "tuned (faster)"
    return {"stored": "stored best", "default": "default"}.get(c, c or "-")


def hit_text(hits: int, evaluations: int) -> str:
    """``12/36 = 33.3 %`` (``-`` without evaluations): the hit rate as docs/runs.md defines it."""
    return f"{hits}/{evaluations} = {hits / evaluations * 100:.1f} %" if evaluations else "- (no evaluations)"


def human_summary(out: dict) -> str:
    """The text the CLI prints for a tune-model result."""
    from tunedb.transfer.apps.tune_model import eta_line, undecided_line

    rows = [[t.get("name", ""), t["source"], t["evaluations"], t["measurements"], t["cache_hits"],
             _est_cell(t.get("best_estimate"), t.get("best")), _est_cell(t.get("default_estimate"), t.get("default_cost")),
             _choice(t), t["weight"]] for t in out["tasks"]]
    table = table_text(["task", "source", "evals", "new", "answered by DB", "cost (chosen)", "default config",
                        "chosen", "weight"], rows)
    lines = [table,
             f"model {out['model']} on {out['target']}: latency {fmt_seconds(out.get('latency'))} "
             f"(default configs {fmt_seconds(out.get('default_latency'))}); latency = sum of weight x each task's "
             "chosen cost (median of its records; n, ±: 95 % CI half-width, a lower level written beside it)",
             f"tasks {out['tasks_total']}: {out['tasks_hit']} hit, {out['tasks_warm']} warm, {out['tasks_cold']} cold",
             eta_line(out),
             f"search: {out['evaluations']} evaluations = {out['measurements']} new + {out['cache_hits']} answered by "
             f"the DB (the table's columns summed; evaluation hit rate {hit_text(out['cache_hits'], out['evaluations'])}), "
             f"{out['remeasurements']} leader re-measurements; search budget {out['search_evaluations']}/{out['budget']}",
             f"references outside the budget (default configs, tuned-vs-default rounds): "
             f"{out.get('reference_measurements', 0)} new, {out.get('reference_cache_hits', 0)} answered by the DB",
             f"time: {fmt_seconds(out.get('t_total_s'))} in all = measuring {fmt_seconds(out.get('measure_s'))} + "
             f"the DB, the cost model and the search's own logic {fmt_seconds(out.get('query_s'))}"]
    if undecided_line(out):
        lines.insert(2, undecided_line(out))
    if out.get("machine_check"):
        lines.append(machine_line(out["machine_check"]))
    if out.get("interrupted"):
        lines.append("interrupted: everything measured is in the DB; rerun to tune the rest")
    if out.get("omitted"):
        lines.append("not in the model (no kernel family): " + ", ".join(
            f"{o.get('name', '?')} x{o.get('count', '?')}" for o in out["omitted"]))
    if out.get("run_id"):
        lines.append(f"run summary stored: {out['run_id']}")
    return "\n".join(lines)
