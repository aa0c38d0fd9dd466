#!/usr/bin/env python3
"""CAD ablations (DistCA Fig. 11 and 12): the tolerance ε against balance and bytes
moved, and ping-pong on and off; simulated by `lct simulate` at 8 ranks on the configured
stream, and ping-pong measured at dp = 2 (one rank per core).

  /usr/bin/python3 scripts/experiments/cad_ablations.py [--quick] [--out DIR] [--config F]
"""
import os
import statistics

import common

NAME = "cad_ablations"


def main():
    a = common.arguments(NAME, __doc__.splitlines()[0])
    ranks = 4 if a.quick else 8
    sim_steps = ["--steps", "2" if a.quick else "8", "--calibration-steps", "1" if a.quick else "3"]
    rows = []
    for eps in ([0.05, 0.2, 1.0] if a.quick else [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]):
        s = common.simulate(["--ranks", str(ranks), "--attention.placement", "cad",
                             "--attention.cad_tolerance", str(eps), "--attention.cad_pingpong", "false"]
                            + sim_steps, a.quick, a.config, a.out)
        rows.append({"experiment": "tolerance", "source": "simulated", "ranks": ranks, "tolerance": eps,
                     "pingpong": "off", "pairs_after_max_over_mean": s["attention_pairs_served_max_over_mean"],
                     "mib_exchanged_per_rank": s["exchange_bytes_per_rank"] / 2**20,
                     "tokens_per_s": s["tokens_per_s"], "idle_percent": 100 * s["idle_fraction"]})
    for pingpong in ("true", "false"):
        s = common.simulate(["--ranks", str(ranks), "--attention.placement", "cad",
                             "--attention.cad_pingpong", pingpong] + sim_steps, a.quick, a.config, a.out)
        rows.append({"experiment": "pingpong", "source": "simulated", "ranks": ranks, "tolerance": 0.1,
                     "pingpong": "on" if pingpong == "true" else "off",
                     "pairs_after_max_over_mean": s["attention_pairs_served_max_over_mean"],
                     "mib_exchanged_per_rank": s["exchange_bytes_per_rank"] / 2**20,
                     "tokens_per_s": s["tokens_per_s"], "idle_percent": 100 * s["idle_fraction"]})
        m = common.mpi_train(2, ["--train.steps", "4" if a.quick else "20", "--attention.placement", "cad",
                                 "--attention.cad_pingpong", pingpong], a.quick, a.config,
                             os.path.join(a.out, f"run_pingpong_{pingpong}"))
        tps = common.wall_clock(m)["tokens_per_s"]  # steps 3..: total tokens / total time
        m = m[2:]
        rows.append({"experiment": "pingpong", "source": "measured", "ranks": 2, "tolerance": 0.1,
                     "pingpong": "on" if pingpong == "true" else "off",
                     "pairs_after_max_over_mean": statistics.median(x["attention_pairs_served_max_over_mean"] for x in m),
                     "mib_exchanged_per_rank": statistics.median(x.get("exchange_bytes_sent", 0) for x in m) / 2**20,
                     "tokens_per_s": tps,
                     "idle_percent": 100 * statistics.median(x["idle_fraction"] for x in m)})
    columns = ["experiment", "source", "ranks", "tolerance", "pingpong", "pairs_after_max_over_mean",
               "mib_exchanged_per_rank", "tokens_per_s", "idle_percent"]
    print(common.write_outputs(a.out, NAME, rows, columns, "CAD ablations: tolerance and ping-pong",
                               "DistCA: removing ping-pong costs 10-17% across nodes (Fig. 11); "
                               "eps 0-0.2 is flat in latency for 8B, and larger eps moves fewer bytes (Fig. 12)."))
    fig, ax = common.subplots(1, 2, figsize=(11, 4))
    tol = [r for r in rows if r["experiment"] == "tolerance"]
    ax[0].plot([r["tolerance"] for r in tol], [r["pairs_after_max_over_mean"] for r in tol], "o-", color="C0")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("tolerance ε")
    ax[0].set_ylabel("attention pairs max/mean after planning", color="C0")
    twin = ax[0].twinx()
    twin.plot([r["tolerance"] for r in tol], [r["mib_exchanged_per_rank"] for r in tol], "s--", color="C1")
    twin.set_ylabel("MiB exchanged per rank and step", color="C1")
    ax[0].set_title(f"tolerance sweep ({ranks} ranks, simulated)")
    ax[0].grid(alpha=0.3)
    pp = [r for r in rows if r["experiment"] == "pingpong"]
    labels = [f"{r['source'][:4]}. {r['ranks']} ranks\nping-pong {r['pingpong']}" for r in pp]
    base = {r["source"]: r["tokens_per_s"] for r in pp if r["pingpong"] == "off"}
    ax[1].bar(range(len(pp)), [r["tokens_per_s"] / base[r["source"]] for r in pp],
              color=["C2" if r["pingpong"] == "on" else "C7" for r in pp])
    ax[1].set_xticks(range(len(pp)))
    ax[1].set_xticklabels(labels, fontsize=8)
    ax[1].set_ylabel("tokens/s relative to ping-pong off")
    ax[1].set_ylim(0.8, 1.2)
    ax[1].axhline(1.0, color="k", linewidth=0.5)
    ax[1].set_title("ping-pong on vs off")
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
