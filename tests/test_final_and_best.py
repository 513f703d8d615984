"""scripts/final_and_best.py: the last and the best evaluation of the global model, over seeds."""

import numpy as np
import pandas as pd

from conftest import load_script

final_and_best = load_script("final_and_best")


def test_final_and_best_by_hand():
    # seed 0 peaks at round 10 (0.60) and ends at 0.50; seed 1 ends on its best, 0.70; Local-like rows
    # without a global model (NaN) are ignored
    histories = pd.DataFrame({
        "partition": ["p"] * 6, "algorithm": ["a"] * 6, "seed": [0, 0, 0, 1, 1, 1],
        "round": [5, 10, 15, 15, 5, 10], "global_acc": [0.40, 0.60, 0.50, 0.70, 0.30, np.nan],
    })
    row = final_and_best.final_and_best(histories).iloc[0]
    assert row.final_mean == 60.0 and np.isclose(row.final_std, 10.0)  # 50 and 70
    assert row.best_mean == 65.0 and np.isclose(row.best_std, 5.0)     # 60 and 70
    assert row.seeds == 2
