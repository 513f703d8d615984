"""ARI of each FeMAM cluster level's grouping (clients still holding that level) against each ground-truth level.

    python scripts/femam_level_ari.py results/femam_offline                                    # multi-level
    python scripts/femam_level_ari.py results/femam_offline femam_offline_cluster fmnist_cluster3

``metrics.json``'s ``structure_scores`` score every client; this scores only the clients that kept
the level (a pruned client's assignment is -1), which is what a level's grouping means.
"""
import argparse
import glob
import json

from sklearn.metrics import adjusted_rand_score


def level_scores(levels: list[dict], truth: dict[str, list[int]]) -> list[dict]:
    """One row per cluster level of a ``structure.json``: the clients that kept it and its ARI
    against every ground-truth grouping, over those clients only."""
    rows = []
    for level in levels:
        if level["kind"] != "cluster":
            continue
        keep = [c for c, a in enumerate(level["assignment"]) if a >= 0]
        found = [level["assignment"][c] for c in keep]
        rows.append({"level": level["level"], "added_round": level["added_round"], "kept": len(keep),
                     "groups": len(level["groups"]),
                     "ari": {name: round(adjusted_rand_score([truth[name][c] for c in keep], found), 2)
                             for name in sorted(truth)}})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the experiment config's results root")
    parser.add_argument("experiment", nargs="?", default="femam_offline")
    parser.add_argument("partition", nargs="?", default="fmnist_ml2.3.5")
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--model", default="small_cnn")
    args = parser.parse_args()
    runs = f"{args.root}/runs/{args.experiment}/{args.dataset}/{args.partition}/{args.model}"
    for path in sorted(glob.glob(f"{runs}/femam*/seed*/structure.json")):
        algorithm, seed = path.split("/")[-3], path.split("/")[-2]
        with open(f"{args.root}/partitions/{args.dataset}/{args.partition}/{seed}.json") as f:
            truth = json.load(f)["groups"]
        with open(path) as f:
            levels = json.load(f)["levels"]
        for row in level_scores(levels, truth):
            print(f"{algorithm:10s} {seed} level {row['level']} (added round {row['added_round']}): "
                  f"{row['kept']} clients kept, {row['groups']} groups, ARI {row['ari']}")


if __name__ == "__main__":
    main()
