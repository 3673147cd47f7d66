#!/usr/bin/env python3
"""readme_table.py BENCH.json [--svg PATH] [--update README.md [--block NAME]]

Turns the JSON of one `rpal bench` run into the Markdown shown in the README:
the machine, date and command of the run, then one-way latency, round trip,
throughput and CPU per message, each with its ratio to uds-epoll in the same
placement, request/response latency and CPU at each offered rate, and with
rounds, each rpal row against futex (latency, rpc) or uds-epoll (CPU) round by
round.  Nothing is typed by hand: rerun the bench, rerun this script.
With --update, replaces the text between <!-- bench:begin --> and
<!-- bench:end --> in the given file instead of printing (--block NAME:
between <!-- NAME:begin --> and <!-- NAME:end -->, for a second run's table).
"""
import argparse
import json
import re
import sys



def label(r):
    return r["transport"] + (" (" + r["wait"] + ")" if r.get("wait") else "")


def ns(r, key):
    v = r.get(key + "_ns")
    return "-" if v is None else ("%.1f" % v if v < 100 else "{:,.0f}".format(v))


def us(v):
    return "-" if v is None else ("%.2f" % (v / 1e3) if v < 1e4 else "{:,.1f}".format(v / 1e3))


def rate_name(rate):
    return "{:,.0f}/s".format(rate) if rate else "max"


def ratio(v):
    return "-" if not v else ("%.2fx" % v if v < 10 else "%.1fx" % v)


def base_name(results):
    """The ratio columns' baseline: uds-epoll, or go-uds in a run of the Go rows alone."""
    names = {r["transport"] for r in results}
    return "uds-epoll" if "uds-epoll" in names or "go-uds" not in names else "go-uds"


def base(results, r):
    name = base_name(results)
    for b in results:
        if (b["transport"] == name and b["placement"] == r["placement"]
                and b["metric"] == r["metric"] and b.get("suite") == r.get("suite")
                and b.get("size") == r.get("size") and b.get("copy", "one-copy") == "one-copy"):
            return b
    return None


def by_round(rows, what, name=label, key="by_round"):
    """The rpal rows' round-by-round comparison with their baseline, as a paragraph."""
    paired = [(v["baseline"], "%s median %.3fx (%.3f to %.3f), lower in %d and higher in %d of %d rounds "
               "(sign test p = %.2g)" % (name(r), v["median"], v["min"], v["max"], v["lower"],
                                         v["higher"], v["rounds"], v["sign_p"]))
              for r in rows for v in [r.get(key)] if v]
    out = []
    for b in dict.fromkeys(p[0] for p in paired):
        out += ["Round by round against %s (each round's %s over the same round's %s; below 1 is "
                "better): %s." % (b, what, b, "; ".join(p[1] for p in paired if p[0] == b)), ""]
    return out


def table(doc, svg):
    res = doc["results"]
    m = doc["machine"]
    out = [
        "Measured by `%s` on %s (%s CPUs, Linux %s%s), %s; TSC %.3f GHz%s."
        % (doc.get("command", "rpal bench"), m.get("cpu", "?"), m.get("nproc", "?"),
           m.get("kernel", "?"), ", under a hypervisor" if m.get("hypervisor") else "",
           doc.get("date", "?"), doc["tsc_hz"] / 1e9,
           "" if m.get("invariant_tsc", True) else " (not invariant)"),
        "",
    ]
    step = m.get("tsc_step_cycles", 1)
    if step > 1:
        out += ["This machine's TSC counts in steps of %d cycles (%.1f ns): every sample is a "
                "multiple of it (means are not), and two medians one step apart may be the "
                "same speed." % (step, step * 1e9 / doc["tsc_hz"]), ""]
    rounds = doc.get("options", {}).get("rounds", 1)
    if rounds > 1:
        out += ["Each case ran %d times, round after round, so that its runs spread over the "
                "whole bench; each row is its median run, by p50 (throughput and CPU: by mean; "
                "a request/response row's CPU figures: its median run by CPU per request): "
                "a slow spell of the VM that hits a minority of a case's runs does not show. "
                "Every run's figure is in the JSON." % rounds, ""]
    bn = base_name(res)
    placements = []
    for r in res:
        if r["placement"] not in placements:
            placements.append(r["placement"])
    for pl in placements:
        for metric, title in (("oneway", "One-way latency"), ("rtt", "Round trip")):
            rows = [r for r in res if r["placement"] == pl and r["metric"] == metric
                    and r.get("suite", "latency") == "latency"]
            if not rows:
                continue
            out += ["**%s, %d B, %s** (%s messages; ns unless stated; vs %s = its p50 / this p50)"
                    % (title, rows[0].get("size", 32), rows[0].get("placement_detail", pl),
                       "{:,}".format(rows[0]["count"]), bn), "",
                    "| transport | p50 cycles | p50 | p99 | p99.9 | max | mean | vs %s |" % bn,
                    "|---|--:|--:|--:|--:|--:|--:|--:|"]
            for r in rows:
                b = base(res, r)
                out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    label(r), "{:,.0f}".format(r["p50"]), ns(r, "p50"), ns(r, "p99"),
                    ns(r, "p999"), ns(r, "max"), ns(r, "mean"),
                    ratio(b["p50"] / r["p50"] if b and r["p50"] else None)))
            out.append("")
            out += by_round(rows, "p50")
        rows = [r for r in res if r["placement"] == pl and r["metric"] == "throughput"]
        if rows:
            out += ["**Throughput, %s** (batches of %s, one echo per batch)" % (pl, rows[0].get("batch", "?")),
                    "", "| transport | msgs/s | vs %s |" % bn, "|---|--:|--:|"]
            for r in rows:
                b = base(res, r)
                out.append("| %s | %s | %s |" % (label(r), "{:,.0f}".format(r["mean"]),
                                                 ratio(r["mean"] / b["mean"] if b and b["mean"] else None)))
            out.append("")
        rows = [r for r in res if r["placement"] == pl and r["metric"] == "cpu_per_msg"]
        if rows:
            out += ["**CPU per message at %s msgs/s, %s** (user+sys of both processes, getrusage)"
                    % ("{:,.0f}".format(rows[0].get("rate", 0)), pl), "",
                    "| transport | CPU ns/msg | vs %s (its / this) |" % bn, "|---|--:|--:|"]
            for r in rows:
                b = base(res, r)
                out.append("| %s | %s | %s |" % (label(r), "{:,.0f}".format(r["mean"]),
                                                 ratio(b["mean"] / r["mean"] if b and r["mean"] else None)))
            out.append("")
            out += by_round(rows, "CPU per message")
        rows = [r for r in res if r["placement"] == pl and r["metric"] == "rpc"]
        if rows:
            out += ["**Request/response at a rate, %d B, concurrency %d, %s** (latency from each "
                    "request's scheduled send, in µs; CPU of both processes per request; max: "
                    "closed loop)" % (rows[0].get("size", 0), rows[0].get("concurrency", 1), pl), "",
                    "| transport | rate | achieved/s | p50 µs | p99 µs | CPU µs/req | CPU cores |",
                    "|---|--:|--:|--:|--:|--:|--:|"]
            for rate in sorted({r["rate"] for r in rows}, key=lambda x: x or float("inf")):
                for r in (r for r in rows if r["rate"] == rate):
                    out.append("| %s | %s | %s | %s | %s | %s | %.3f |" % (
                        label(r), rate_name(rate),
                        "{:,.0f}".format(r["achieved_rate"]), us(r["p50_ns"]), us(r["p99_ns"]),
                        us(r["cpu_per_req_ns"]), r["cpu_cores"]))
            out.append("")
            at_rate = lambda r: "%s at %s" % (label(r), rate_name(r["rate"]))
            out += by_round(rows, "p50", at_rate)
            out += by_round(rows, "CPU per request", at_rate, "by_round_cpu")
    for u in doc.get("unavailable", []):
        out.append("Not measured: %s (%s)." % (u["transport"], u["reason"]))
    for e in doc.get("errors", []):
        out.append("Failed in this run: %s." % e)
    if svg:
        out += ["", "![one-way latency distributions](%s)" % svg]
    return "\n".join(out).rstrip() + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--svg", help="path of the plot to link under the table")
    ap.add_argument("--update", metavar="FILE", help="replace the bench block in FILE")
    ap.add_argument("--block", default="bench", help="the block's name (default: bench)")
    a = ap.parse_args()
    begin, end = "<!-- %s:begin -->" % a.block, "<!-- %s:end -->" % a.block
    with open(a.json) as f:
        doc = json.load(f)
    text = table(doc, a.svg)
    if not a.update:
        sys.stdout.write(text)
        return 0
    with open(a.update) as f:
        readme = f.read()
    if begin not in readme or end not in readme:
        sys.exit("readme_table: %s has no %s ... %s block" % (a.update, begin, end))
    readme = re.sub(re.escape(begin) + ".*?" + re.escape(end),
                    lambda _: begin + "\n" + text + end, readme, flags=re.S)
    with open(a.update, "w") as f:
        f.write(readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
