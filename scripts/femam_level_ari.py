"""ARI of each FeMAM cluster level's grouping (clients still holding that level) against each ground-truth level."""
import json, sys, glob
from sklearn.metrics import adjusted_rand_score as ari
root = sys.argv[1]
for path in sorted(glob.glob(f"{root}/runs/femam_offline/fashion_mnist/fmnist_ml2.3.5/small_cnn/femam*/seed*/structure.json")):
    alg, seed = path.split("/")[-3], path.split("/")[-2]
    truth = json.load(open(f"{root}/partitions/fashion_mnist/fmnist_ml2.3.5/{seed}.json"))["groups"]
    for level in json.load(open(path))["levels"]:
        if level["kind"] != "cluster":
            continue
        keep = [c for c, a in enumerate(level["assignment"]) if a >= 0]
        scores = {name: round(ari([truth[name][c] for c in keep], [level["assignment"][c] for c in keep]), 2) for name in sorted(truth)}
        print(f"{alg:10s} {seed} level {level['level']} (added round {level['added_round']}): {len(keep)} clients kept, {len(level['groups'])} groups, ARI {scores}")
