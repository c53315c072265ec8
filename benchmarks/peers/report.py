"""Rows from the systems' results, ratios to the ceiling, the rich table and the PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def rows(results: list[dict[str, Any]], ceiling: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per system, variant and size: throughput, request latency under load, one-at-a-time
    latency (on the system's first row of a size), and the ratio of its entries/s to the ceiling's."""
    out: list[dict[str, Any]] = []
    for r in results:
        if "error" in r:
            out.append({"system": r["system"], "variant": r.get("variant", "-"), "size": r["size"],
                        "error": r["error"]})
            continue
        single = r.get("single")
        for variant in ("batched", "unbatched"):
            tp = r.get(variant)
            if tp is None:
                continue
            row: dict[str, Any] = {
                "system": r["system"], "variant": variant, "label": tp.get("label", variant), "size": r["size"],
                "batch": tp.get("batch", 1),
                "entries_per_s": tp["appends_per_s"], "mib_per_s": tp["mib_per_s"],
                "load_p50_ms": tp["request_latency"]["p50_ms"], "load_p99_ms": tp["request_latency"]["p99_ms"],
                "fsync": r["fsync"], "errors": tp.get("errors", 0)}
            c = ceiling.get(r["size"])
            if c and c.get("entries_s"):
                row["vs_ceiling"] = round(tp["appends_per_s"] / c["entries_s"], 3)
            if single is not None:
                row |= {"single_p50_ms": single["p50_ms"], "single_p99_ms": single["p99_ms"]}
                single = None  # shown once per system and size
            out.append(row)
    for size, c in sorted(ceiling.items()):
        if "error" in c:
            out.append({"system": "ceiling", "variant": "-", "size": size, "error": c["error"]})
        else:
            out.append({"system": "ceiling", "variant": "batched", "size": size,
                        "label": f"batches of {c['batch']}, {c['inflight']} in flight",
                        "batch": c["batch"], "entries_per_s": c["entries_s"], "mib_per_s": c["mib_s"],
                        "load_p50_ms": c["p50_ms"], "load_p99_ms": c["p99_ms"], "fsync": True, "vs_ceiling": 1.0})
    return out


def table(table_rows: list[dict[str, Any]], title: str) -> Any:
    from rich.table import Table

    t = Table(title=title)
    for name, justify in (("system", "left"), ("variant", "left"), ("size", "right"), ("entries/s", "right"),
                          ("MiB/s", "right"), ("× ceiling", "right"), ("loaded p50 / p99 ms", "right"),
                          ("single p50 / p99 ms", "right"), ("fsync", "center")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in sorted(table_rows, key=lambda r: (r["size"], r["system"] == "ceiling")):
        if "error" in r:
            t.add_row(r["system"], r["variant"], _size(r["size"]), f"[red]{r['error'][:60]}[/red]", *[""] * 5)
            continue
        single = f"{r['single_p50_ms']:.2f} / {r['single_p99_ms']:.2f}" if "single_p50_ms" in r else ""
        t.add_row(r["system"], r.get("label", r["variant"]), _size(r["size"]), f"{r['entries_per_s']:,}",
                  f"{r['mib_per_s']}",
                  f"{r['vs_ceiling']:.2f}" if "vs_ceiling" in r else "",
                  f"{r['load_p50_ms']:.1f} / {r['load_p99_ms']:.1f}", single, "yes" if r["fsync"] else "[b]no[/b]")
    return t


def plot(table_rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Left: entries/s per system and variant for each size (log scale). Right: one-at-a-time p50 and
    p99 per system for each size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in table_rows if "error" not in r]
    sizes = sorted({r["size"] for r in ok})
    series = list(dict.fromkeys((r["system"], r["variant"]) for r in ok))
    labels = {(r["system"], r["variant"]): r.get("label", r["variant"]) for r in ok}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / max(1, len(series))
    palette = plt.get_cmap("tab10")
    systems = list(dict.fromkeys(s for s, _ in series))
    color = {s: "0.5" if s == "ceiling" else palette(i % 10) for i, s in enumerate(systems)}
    for i, (system, variant) in enumerate(series):
        xs, ys = [], []
        for j, size in enumerate(sizes):
            hit = [r for r in ok if (r["system"], r["variant"], r["size"]) == (system, variant, size)]
            if hit:
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(hit[0]["entries_per_s"])
        synced = all(r["fsync"] for r in ok if r["system"] == system)
        label = f"{system}: {labels[system, variant]}" + ("" if synced else " (no fsync)")
        unbatched = variant == "unbatched"  # same colour as the system's batched bars, hatched and paler
        bars = ax1.bar(xs, ys, width, label=label, color=color[system], alpha=0.55 if unbatched else 1.0,
                       hatch="//" if unbatched else None, edgecolor="white")
        ax1.bar_label(bars, labels=[f"{y / 1000:.0f}k" if y >= 1000 else f"{y}" for y in ys], fontsize=7,
                      rotation=90, padding=2)
    ax1.set_yscale("log")
    ax1.set_ylim(top=ax1.get_ylim()[1] * 2.5)  # room for the labels above the tallest bars
    ax1.set_xticks(range(len(sizes)), [f"{_size(s)} entries" for s in sizes])
    ax1.set_ylabel("entries/s (log scale)")
    ax1.set_title("Throughput, 3 replicas on 127.0.0.1")
    handles, names = ax1.get_legend_handles_labels()
    lat = [r for r in ok if "single_p50_ms" in r]
    systems = list(dict.fromkeys(r["system"] for r in lat))
    width = 0.8 / max(1, len(systems))
    labelled: set[str] = set()
    for i, system in enumerate(systems):
        for j, size in enumerate(sizes):
            hit = [r for r in lat if (r["system"], r["size"]) == (system, size)]
            if not hit:
                continue
            x = j + (i - (len(systems) - 1) / 2) * width
            p50, p99 = hit[0]["single_p50_ms"], hit[0]["single_p99_ms"]
            ax2.bar(x, p99, width, color=color[system], alpha=0.35)
            ax2.bar(x, p50, width, color=color[system], label=None if system in labelled else system)
            ax2.annotate(f"{p50:.1f}", (x, p50), ha="center", va="bottom", fontsize=7)
            ax2.annotate(f"{p99:.1f}", (x, p99), ha="center", va="bottom", fontsize=7)
            labelled.add(system)
    ax2.set_xticks(range(len(sizes)), [f"{_size(s)} entries" for s in sizes])
    ax2.set_ylabel("ms")
    ax2.set_title("One append at a time: p50 (solid), p99 (pale)")
    if lat:
        ax2.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.legend(handles, names, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # the bottom tenth holds the throughput legend
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
