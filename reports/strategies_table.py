#!/usr/bin/env python3
"""The markdown table of reports/strategies.sh from its strategies.csv.

One row per (cluster, model): each strategy's simulated iteration and fullest device, megatron as
the fastest of its enumerated layouts (its search time summed over them), the winner (strategies
within 0.5 % of the fastest tie) with hap's margin, and the search times. Then how often each
strategy wins. Usage: strategies_table.py STRATEGIES_CSV
"""
import csv
import sys

STRATEGIES = ["hap", "dp-ev", "dp-cp", "megatron", "galvatron", "alpa"]
TIE = 1.005


def cell(r):
    if r is None:
        return "-"
    if r["iteration_s"] is None:
        return "- (%s)" % (r["detail"] or "no plan")
    text = "%.1f ms (%.1f GiB)" % (1e3 * r["iteration_s"], r["peak_bytes"] / 2**30)
    if r.get("layout"):
        text += " " + r["layout"]
    return text


def main(path):
    rows = {}
    order = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            key = (raw["cluster"], raw["label"])
            if key not in rows:
                rows[key] = {}
                order.append(key)
            it = float(raw["iteration_s"]) if raw["iteration_s"] else None
            r = {
                "iteration_s": it,
                "peak_bytes": float(raw["peak_bytes"]) if raw["peak_bytes"] else 0.0,
                "search_s": float(raw["search_s"]),
                "detail": raw["detail"],
            }
            name = raw["strategy"]
            if name.startswith("megatron:"):
                best = rows[key].get("megatron")
                searched = (best["search_s"] if best else 0.0) + r["search_s"]
                tried = (best["tried"] if best else 0) + 1
                if it is not None and (best is None or best["iteration_s"] is None
                                       or it < best["iteration_s"]):
                    best = dict(r, layout=name.split(":", 1)[1])
                elif best is None:
                    best = dict(r, iteration_s=None)
                best["search_s"], best["tried"] = searched, tried
                if best["iteration_s"] is None:
                    best["detail"] = "none of %d layouts fits" % tried
                rows[key]["megatron"] = best
            else:
                rows[key][name] = r
    print("| cluster | model | " + " | ".join(
        "megatron (best layout)" if s == "megatron" else s for s in STRATEGIES) +
          " | winner | search s (hap / galvatron / alpa / megatron's layouts) |")
    print("|---|---|" + "---:|" * len(STRATEGIES) + "---|---|")
    wins = {s: 0 for s in STRATEGIES}
    for key in order:
        rs = rows[key]
        times = {s: rs[s]["iteration_s"] for s in STRATEGIES
                 if s in rs and rs[s]["iteration_s"] is not None}
        winner = "none"
        if times:
            best = min(times.values())
            won = [s for s in STRATEGIES if s in times and times[s] <= best * TIE]
            for s in won:
                wins[s] += 1
            winner = " = ".join(won)
            if "hap" not in won and "hap" in times:
                winner += " (hap %.2fx its time)" % (times["hap"] / best)
            elif "hap" in won and len(times) > len(won):
                rest = min(t for s, t in times.items() if s not in won)
                winner += " (next %.2fx)" % (rest / best)
        search = " / ".join("%.2f" % rs[s]["search_s"] if s in rs else "-"
                            for s in ["hap", "galvatron", "alpa", "megatron"])
        print("| %s | %s | %s | %s | %s |" % (key[0], key[1], " | ".join(
            cell(rs.get(s)) for s in STRATEGIES), winner, search))
    print()
    print("Wins (ties count for each): " + ", ".join("%s %d" % (s, wins[s]) for s in STRATEGIES) +
          " of %d rows." % len(order))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: strategies_table.py STRATEGIES_CSV")
    main(sys.argv[1])
