"""Layer 7, the workflow's view: the config's full validation (:mod:`.validate`), what the jobs
would hit (:mod:`.preflight`), stale results (:mod:`.stale`), the cost report and its fit
(:mod:`.cost_report`, :mod:`.cost_fit`).  May import every layer."""
