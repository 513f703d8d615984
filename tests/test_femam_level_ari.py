"""scripts/femam_level_ari.py: a cluster level's ARI over the clients that kept it, on a hand-made structure."""

from conftest import load_script

femam_level_ari = load_script("femam_level_ari")


def test_pruned_clients_leave_the_score():
    truth = {"fine": [0, 0, 1, 1, 2, 2], "coarse": [0, 0, 0, 0, 1, 1]}
    levels = [
        {"level": 1, "kind": "global", "added_round": 0, "groups": {"0": list(range(6))}, "assignment": [0] * 6},
        # clients 4 and 5 pruned (-1); the others grouped exactly as the fine truth, under other labels
        {"level": 2, "kind": "cluster", "added_round": 15, "groups": {"5": [0, 1], "7": [2, 3]},
         "assignment": [5, 5, 7, 7, -1, -1]},
        {"level": 3, "kind": "personal", "added_round": 20, "groups": {}, "assignment": list(range(6))},
    ]
    (row,) = femam_level_ari.level_scores(levels, truth)
    assert (row["level"], row["added_round"], row["kept"], row["groups"]) == (2, 15, 4, 2)
    # fine truth over clients 0-3 is [0,0,1,1]: recovered exactly; coarse over them is one group: ARI 0
    assert row["ari"] == {"coarse": 0.0, "fine": 1.0}
